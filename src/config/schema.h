/* schema.h — the table of every recognised config key (private to src/config).
 *
 * One row per dotted key ("Model.hidden_size") says where the value goes in llm4d_config, its type, default,
 * command-line flag and one-line help. Defaults, YAML, flags, -o overrides and --help all read this one table, so
 * they cannot disagree. Keys PaddleFleetX defines but llm4d does not act on are rows of type NOEFFECT: accepted,
 * and listed in cfg->noeffect when set to a value other than their "neutral" ones (the values that describe what
 * llm4d does anyway, e.g. Model.fused_linear: False). Legacy spellings are ALIAS rows naming their canonical key. */
#ifndef LLM4D_CONFIG_SCHEMA_H
#define LLM4D_CONFIG_SCHEMA_H

#include <stddef.h>

#include "config/config.h"
#include "config/pyval.h"

typedef enum {
    LLM4D_KT_INT,      /* int */
    LLM4D_KT_I64,      /* int64_t */
    LLM4D_KT_U64,      /* uint64_t, given as a non-negative integer */
    LLM4D_KT_FLOAT,    /* float */
    LLM4D_KT_BOOL,     /* int 0/1 */
    LLM4D_KT_STR,      /* char[size] */
    LLM4D_KT_SPLIT,    /* char[size] holding "a,b,c"; given as a list [949, 50, 1] or the string '949,50,1' */
    LLM4D_KT_COUNTS,   /* char[size] holding "a,b,..."; non-negative integers given as a list [3, 3, 2] or '3,3,2' */
    LLM4D_KT_MB,       /* int64_t bytes, given in megabytes */
    LLM4D_KT_BACKEND,  /* int backend_ref, given as cpu|ref */
    LLM4D_KT_NOEFFECT, /* accepted, no effect in llm4d */
    LLM4D_KT_ALIAS,    /* another spelling of `extra` */
} llm4d_key_type;

typedef struct {
    const char *key;      /* "Section.sub.key" */
    llm4d_key_type type;
    size_t off, size;     /* field in llm4d_config */
    const char *def;      /* default, as text read like an -o value; NOEFFECT: PaddleFleetX's default (help only) */
    const char *none_val; /* what an empty/None value means; NULL: the default */
    const char *flag;     /* "--max_lr", or NULL */
    const char *extra;    /* ALIAS: canonical key; NOEFFECT: neutral values separated by '|' (NULL: none; "*": all) */
    int opaque;           /* NOEFFECT: a mapping is accepted as the value (Global.flags, Profiler.summary) */
    int ext;              /* 1: an llm4d addition, not a PaddleFleetX key */
    const char *help;
} llm4d_key;

/* All rows, in help order. */
const llm4d_key *llm4d_keys(int *n);
/* Exact match of a dotted key, or NULL. */
const llm4d_key *llm4d_key_find(const char *path);
/* Row of a flag ("--max_lr"), or NULL. */
const llm4d_key *llm4d_key_by_flag(const char *flag);
/* 1 when some key starts with path + "." (path is a section such as "Optimizer.lr"). */
int llm4d_key_is_section(const char *path);
/* The row an ALIAS stands for (the row itself otherwise). */
const llm4d_key *llm4d_key_canonical(const llm4d_key *k);

/* Set a key from a value. `raw` is the text as written (kept for string keys given as numbers), `subject` names
 * the key as the user wrote it ("Model.hidden_size", "--max_lr") and `where` says where (" (in x.yaml, line 3)").
 * A None value resets the key to its none_val/default and forgets that it was set. `mark` records the key in
 * cfg->explicit_keys (0 when applying built-in defaults). Wrong types are LLM4D_EUSER naming the expected type. */
llm4d_code llm4d_key_set(llm4d_config *cfg, const llm4d_key *k, const llm4d_pv *v, const char *raw,
                         const char *subject, const char *where, int mark, llm4d_err *err);

/* The key or section nearest to an unknown dotted path (Levenshtein over full paths and over the last
 * component, so a key put in the wrong section is found too) into buf; 0 when nothing is near enough. */
int llm4d_key_suggest(const char *path, char *buf, size_t n);
/* The flag nearest to an unknown one, or NULL. */
const char *llm4d_flag_suggest(const char *flag);

int llm4d_levenshtein(const char *a, const char *b);

/* cfg->explicit_keys / cfg->noeffect bookkeeping. */
int llm4d_config_is_explicit(const llm4d_config *cfg, const char *key);

#endif
