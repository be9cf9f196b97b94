/* yamltree.c — load a config file with libyaml and resolve `_base_` inheritance (see yamltree.h).
 *
 * The document API is used (not the event API) because it resolves anchors and aliases for us; the document is
 * copied into llm4d_ynode trees at once and freed. `_base_` chains are followed with realpath() so that a cycle is
 * found whatever relative spelling the files use. */
#include "config/yamltree.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "config/pyval.h"

#define YT_MAX_BASE_DEPTH 16
#define YT_MAX_NODE_DEPTH 64

static void ynode_free(llm4d_ynode *n) {
    if (!n) return;
    free(n->text);
    for (int i = 0; i < n->n; i++) {
        if (n->keys) free(n->keys[i]);
        ynode_free(n->kids[i]);
    }
    free(n->keys);
    free(n->kids);
    free(n);
}

void llm4d_ytree_free(llm4d_ytree *t) {
    ynode_free(t->root);
    for (int i = 0; i < t->nfiles; i++) free(t->files[i]);
    memset(t, 0, sizeof *t);
}

static llm4d_ynode *ynode_new(llm4d_ynode_kind kind, const char *file, int line, int col) {
    llm4d_ynode *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->kind = kind;
    n->file = file;
    n->line = line;
    n->col = col;
    return n;
}

/* Append (key, kid) to a MAP (key NULL for a SEQ); takes ownership of both, also on failure. */
static int ynode_push(llm4d_ynode *n, char *key, llm4d_ynode *kid) {
    if (n->n == n->cap) {
        int ncap = n->cap ? n->cap * 2 : 8;
        llm4d_ynode **nk = realloc(n->kids, (size_t)ncap * sizeof *nk);
        if (nk) n->kids = nk;
        char **nkeys = n->kind == LLM4D_YN_MAP ? realloc(n->keys, (size_t)ncap * sizeof *nkeys) : NULL;
        if (nkeys) n->keys = nkeys;
        if (!nk || (n->kind == LLM4D_YN_MAP && !nkeys)) {
            free(key);
            ynode_free(kid);
            return -1;
        }
        n->cap = ncap;
    }
    if (n->kind == LLM4D_YN_MAP) n->keys[n->n] = key;
    n->kids[n->n++] = kid;
    return 0;
}

/* Remove key from a MAP and return its value (caller owns it), or NULL. */
static llm4d_ynode *ynode_take(llm4d_ynode *map, const char *key) {
    for (int i = 0; i < map->n; i++) {
        if (strcmp(map->keys[i], key)) continue;
        llm4d_ynode *v = map->kids[i];
        free(map->keys[i]);
        memmove(map->keys + i, map->keys + i + 1, (size_t)(map->n - i - 1) * sizeof *map->keys);
        memmove(map->kids + i, map->kids + i + 1, (size_t)(map->n - i - 1) * sizeof *map->kids);
        map->n--;
        return v;
    }
    return NULL;
}

static llm4d_code oom(llm4d_err *err, const char *file) {
    return llm4d_fail(err, LLM4D_ENOMEM, "out of memory while reading %s", file);
}

static llm4d_code convert(yaml_document_t *doc, yaml_node_t *yn, const char *file, int depth, llm4d_ynode **out,
                          llm4d_err *err) {
    *out = NULL;
    int line = (int)yn->start_mark.line + 1, col = (int)yn->start_mark.column + 1;
    if (depth > YT_MAX_NODE_DEPTH)
        return llm4d_fail(err, LLM4D_EUSER, "%s:%d:%d: YAML nesting deeper than %d levels (recursive alias?)", file,
                          line, col, YT_MAX_NODE_DEPTH);
    if (yn->type == YAML_SCALAR_NODE) {
        llm4d_ynode *n = ynode_new(LLM4D_YN_SCALAR, file, line, col);
        if (!n) return oom(err, file);
        n->text = strndup((const char *)yn->data.scalar.value, yn->data.scalar.length);
        if (!n->text) {
            ynode_free(n);
            return oom(err, file);
        }
        n->plain = yn->data.scalar.style == YAML_PLAIN_SCALAR_STYLE || yn->data.scalar.style == YAML_ANY_SCALAR_STYLE;
        *out = n;
        return LLM4D_OK;
    }
    if (yn->type == YAML_SEQUENCE_NODE) {
        llm4d_ynode *n = ynode_new(LLM4D_YN_SEQ, file, line, col);
        if (!n) return oom(err, file);
        for (yaml_node_item_t *it = yn->data.sequence.items.start; it < yn->data.sequence.items.top; it++) {
            llm4d_ynode *kid;
            llm4d_code rc = convert(doc, yaml_document_get_node(doc, *it), file, depth + 1, &kid, err);
            if (rc) {
                ynode_free(n);
                return rc;
            }
            if (ynode_push(n, NULL, kid)) {
                ynode_free(n);
                return oom(err, file);
            }
        }
        *out = n;
        return LLM4D_OK;
    }
    if (yn->type == YAML_MAPPING_NODE) {
        llm4d_ynode *n = ynode_new(LLM4D_YN_MAP, file, line, col);
        if (!n) return oom(err, file);
        for (yaml_node_pair_t *pr = yn->data.mapping.pairs.start; pr < yn->data.mapping.pairs.top; pr++) {
            yaml_node_t *kn = yaml_document_get_node(doc, pr->key);
            if (kn->type != YAML_SCALAR_NODE) {
                ynode_free(n);
                return llm4d_fail(err, LLM4D_EUSER, "%s:%d:%d: a mapping key must be a plain name, not a list or "
                                  "mapping", file, (int)kn->start_mark.line + 1, (int)kn->start_mark.column + 1);
            }
            char *key = strndup((const char *)kn->data.scalar.value, kn->data.scalar.length);
            if (!key) {
                ynode_free(n);
                return oom(err, file);
            }
            llm4d_ynode *kid;
            llm4d_code rc = convert(doc, yaml_document_get_node(doc, pr->value), file, depth + 1, &kid, err);
            if (rc) {
                free(key);
                ynode_free(n);
                return rc;
            }
            /* PyYAML keeps the last of duplicated keys */
            ynode_free(ynode_take(n, key));
            if (ynode_push(n, key, kid)) {
                ynode_free(n);
                return oom(err, file);
            }
        }
        *out = n;
        return LLM4D_OK;
    }
    return llm4d_fail(err, LLM4D_EINTERNAL, "%s:%d:%d: libyaml returned an empty node", file, line, col);
}

static llm4d_code parse_file(const char *path, const char *file_label, llm4d_ynode **out, llm4d_err *err) {
    *out = NULL;
    /* before opening: fopen of a named pipe waits for a writer, forever; libyaml would read a device endlessly */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return llm4d_fail(err, LLM4D_EUSER, "config file '%s' is %s, not a file; give the path of a YAML file", path,
                          S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a named pipe" : "a device");
    FILE *f = fopen(path, "rb");
    if (!f)
        return llm4d_fail(err, LLM4D_EUSER, "cannot read config file '%s': %s; check the path given with -c",
                          path, strerror(errno));
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return oom(err, path);
    }
    yaml_parser_set_input_file(&parser, f);
    llm4d_code rc = LLM4D_OK;
    if (!yaml_parser_load(&parser, &doc)) {
        if (parser.error == YAML_MEMORY_ERROR) {
            rc = oom(err, path);
        } else if (parser.error == YAML_READER_ERROR) {
            rc = llm4d_fail(err, LLM4D_EUSER, "%s: not readable as YAML text: %s at byte %zu", path,
                            parser.problem ? parser.problem : "unknown problem", parser.problem_offset);
        } else {
            const yaml_mark_t *m = &parser.problem_mark;
            rc = llm4d_fail(err, LLM4D_EUSER, "%s:%zu:%zu: YAML syntax error: %s%s%s; fix the file's indentation "
                            "or quoting there", path, m->line + 1, m->column + 1,
                            parser.problem ? parser.problem : "unknown problem", parser.context ? " " : "",
                            parser.context ? parser.context : "");
        }
        yaml_parser_delete(&parser);
        fclose(f);
        return rc;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        *out = ynode_new(LLM4D_YN_MAP, file_label, 1, 1);
        if (!*out) rc = oom(err, path);
    } else if (root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0) {
        *out = ynode_new(LLM4D_YN_MAP, file_label, 1, 1);
        if (!*out) rc = oom(err, path);
    } else if (root->type != YAML_MAPPING_NODE) {
        rc = llm4d_fail(err, LLM4D_EUSER, "%s:%d:%d: the top level of a config must be a mapping of sections "
                        "(Global:, Engine:, Model:, Data:, Optimizer:, Distributed:)", path,
                        (int)root->start_mark.line + 1, (int)root->start_mark.column + 1);
    } else {
        rc = convert(&doc, root, file_label, 0, out, err);
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}

static int scalar_is_false(const llm4d_ynode *n) {
    if (!n || n->kind != LLM4D_YN_SCALAR) return 0;
    llm4d_pv v;
    if (llm4d_pv_from_yaml_scalar(n->text, n->plain, &v)) return 0;
    int r = (v.kind == LLM4D_PV_BOOL || v.kind == LLM4D_PV_INT) && v.i == 0;
    llm4d_pv_free(&v);
    return r;
}

/* Merge child into base (both MAPs), PaddleFleetX's _update_dic; consumes child. */
static void merge(llm4d_ynode *base, llm4d_ynode *child) {
    for (int i = 0; i < child->n; i++) {
        char *key = child->keys[i];
        llm4d_ynode *cv = child->kids[i];
        child->keys[i] = NULL;
        child->kids[i] = NULL;
        llm4d_ynode *bv = NULL;
        int bi = -1;
        for (int j = 0; j < base->n; j++)
            if (!strcmp(base->keys[j], key)) {
                bv = base->kids[j];
                bi = j;
            }
        if (bv && bv->kind == LLM4D_YN_MAP && cv->kind == LLM4D_YN_SCALAR && cv->plain && !cv->text[0]) {
            /* An empty section ("Model:" with nothing under it) would wipe the base section in PaddleFleetX and
             * then crash it; keeping the base section is the only useful reading. */
            ynode_free(cv);
            free(key);
            continue;
        }
        if (cv->kind == LLM4D_YN_MAP) {
            llm4d_ynode *inh = ynode_take(cv, "_inherited_");
            int replace = scalar_is_false(inh);
            ynode_free(inh);
            if (bv && bv->kind == LLM4D_YN_MAP && !replace) {
                merge(bv, cv);
                free(key);
                continue;
            }
        }
        if (bi >= 0) {
            ynode_free(bv);
            base->kids[bi] = cv;
            free(key);
        } else if (ynode_push(base, key, cv)) {
            /* out of memory: the key is dropped; the caller cannot tell, but this needs a nearly full heap */
        }
    }
    child->n = 0;
    ynode_free(child);
}

typedef struct {
    char real[YT_MAX_BASE_DEPTH + 1][PATH_MAX];
    const char *shown[YT_MAX_BASE_DEPTH + 1];
} yt_chain;

static llm4d_code load_rec(llm4d_ytree *t, const char *path, yt_chain *chain, int depth, llm4d_ynode **out,
                           llm4d_err *err) {
    *out = NULL;
    if (depth > YT_MAX_BASE_DEPTH)
        return llm4d_fail(err, LLM4D_EUSER, "_base_ chain deeper than %d files at '%s'; shorten the chain",
                          YT_MAX_BASE_DEPTH, path);
    if (!realpath(path, chain->real[depth])) {
        if (depth == 0)
            return llm4d_fail(err, LLM4D_EUSER, "cannot read config file '%s': %s; check the path given with -c",
                              path, strerror(errno));
        return llm4d_fail(err, LLM4D_EUSER, "cannot read config file '%s' (the _base_ of %s): %s; _base_ paths are "
                          "relative to the including file's directory", path, chain->shown[depth - 1],
                          strerror(errno));
    }
    for (int i = 0; i < depth; i++) {
        if (strcmp(chain->real[i], chain->real[depth])) continue;
        char msg[900];
        size_t pos = 0;
        msg[0] = 0;
        for (int j = i; j < depth && pos < sizeof msg; j++)
            pos += (size_t)snprintf(msg + pos, sizeof msg - pos, "%s -> ", chain->shown[j]);
        return llm4d_fail(err, LLM4D_EUSER, "_base_ cycle: %s%s; remove one of these _base_ keys", msg, path);
    }
    if (t->nfiles >= (int)(sizeof t->files / sizeof t->files[0]))
        return llm4d_fail(err, LLM4D_EUSER, "too many config files in the _base_ chain of '%s'", path);
    char *label = strdup(path);
    if (!label) return oom(err, path);
    t->files[t->nfiles++] = label;
    chain->shown[depth] = label;

    llm4d_ynode *root;
    LLM4D_TRY(parse_file(path, label, &root, err));
    llm4d_ynode *bn = ynode_take(root, "_base_");
    if (!bn) {
        *out = root;
        return LLM4D_OK;
    }
    llm4d_pv bv = {0};
    if (bn->kind != LLM4D_YN_SCALAR || llm4d_pv_from_yaml_scalar(bn->text, bn->plain, &bv) ||
        bv.kind != LLM4D_PV_STR || !bv.s[0]) {
        llm4d_code rc = llm4d_fail(err, LLM4D_EUSER, "%s:%d:%d: _base_ must be the path of a YAML file", path,
                                   bn->line, bn->col);
        llm4d_pv_free(&bv);
        ynode_free(bn);
        ynode_free(root);
        return rc;
    }
    char base_path[PATH_MAX];
    const char *rel = bv.s;
    if (rel[0] == '/') {
        snprintf(base_path, sizeof base_path, "%s", rel);
    } else {
        while (rel[0] == '.' && rel[1] == '/') rel += 2;
        const char *slash = strrchr(path, '/');
        int dirlen = slash ? (int)(slash - path) : 0;
        if (slash) snprintf(base_path, sizeof base_path, "%.*s/%s", dirlen, path, rel);
        else snprintf(base_path, sizeof base_path, "%s", rel);
    }
    llm4d_pv_free(&bv);
    ynode_free(bn);
    llm4d_ynode *base;
    llm4d_code rc = load_rec(t, base_path, chain, depth + 1, &base, err);
    if (rc) {
        ynode_free(root);
        return rc;
    }
    merge(base, root);
    *out = base;
    return LLM4D_OK;
}

llm4d_code llm4d_ytree_load(llm4d_ytree *t, const char *path, llm4d_err *err) {
    memset(t, 0, sizeof *t);
    yt_chain *chain = calloc(1, sizeof *chain); /* ~70 KB of paths: keep it off the stack */
    if (!chain) return oom(err, path);
    llm4d_code rc = load_rec(t, path, chain, 0, &t->root, err);
    free(chain);
    if (rc) llm4d_ytree_free(t);
    return rc;
}
