/* yamltree.h — a PaddleFleetX config file as a tree, with `_base_` inheritance resolved (private to src/config).
 *
 * libyaml's document API gives nodes that live only as long as the parser's document; llm4d copies them into its
 * own small tree so that the `_base_` files can be merged (PaddleFleetX's _update_dic: dicts merged recursively,
 * the child winning; lists and scalars replaced; a child dict holding `_inherited_: False` replaces the base dict)
 * and every node keeps the file and line it came from, for error messages after merging. */
#ifndef LLM4D_CONFIG_YAMLTREE_H
#define LLM4D_CONFIG_YAMLTREE_H

#include "core/error.h"

typedef enum { LLM4D_YN_SCALAR, LLM4D_YN_SEQ, LLM4D_YN_MAP } llm4d_ynode_kind;

typedef struct llm4d_ynode {
    llm4d_ynode_kind kind;
    char *text;                /* SCALAR: the scalar's text (owned) */
    int plain;                 /* SCALAR: 1 when unquoted (so YAML 1.1 null/bool resolution applies) */
    const char *file;          /* the file this node was read from (owned by the llm4d_ytree) */
    int line, col;             /* 1-based */
    int n, cap;
    char **keys;               /* MAP: n keys (owned); NULL for SEQ */
    struct llm4d_ynode **kids; /* MAP values / SEQ items (owned) */
} llm4d_ynode;

typedef struct {
    llm4d_ynode *root; /* a MAP (an empty file gives an empty MAP) */
    int nfiles;
    char *files[32];   /* the file names nodes point to: the -c file and its _base_ chain */
} llm4d_ytree;

/* Read `path` and, recursively, its `_base_` files (relative to the including file's directory), merged.
 * Every failure is LLM4D_EUSER naming the file: unreadable, YAML syntax error (file:line:column and libyaml's
 * problem), a top level that is not a mapping, a `_base_` cycle or chain deeper than 16. */
llm4d_code llm4d_ytree_load(llm4d_ytree *t, const char *path, llm4d_err *err);

void llm4d_ytree_free(llm4d_ytree *t);


#endif
