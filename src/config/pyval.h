/* pyval.h — scalar values the way PaddleFleetX's config loader sees them (private to src/config).
 *
 * PaddleFleetX reads YAML with PyYAML (YAML 1.1 plain-scalar resolution: yes/no/on/off are booleans, "1.0e-8" is a
 * float, "1e-5" is a string) and then passes every string through Python's ast.literal_eval, so "1e-5" ends up a
 * float, "'949,50,1'" a tuple and "[1, 5]" a list; `-o key=value` uses eval() with a fallback to the raw string.
 * llm4d reproduces those conversions here so that a Paddle config means the same thing to llm4d. Values are small
 * (one scalar or a short list), so they are plain heap trees freed with llm4d_pv_free. */
#ifndef LLM4D_CONFIG_PYVAL_H
#define LLM4D_CONFIG_PYVAL_H

#include <stddef.h>

typedef enum {
    LLM4D_PV_NONE = 0, /* None, or an empty YAML value: "unset" */
    LLM4D_PV_BOOL,
    LLM4D_PV_INT,
    LLM4D_PV_FLOAT,
    LLM4D_PV_STR,
    LLM4D_PV_LIST,     /* Python list or tuple (llm4d does not distinguish them) */
    LLM4D_PV_MAP,      /* a mapping where a value was expected; only its size is kept, in i ("{}" has i 0) */
} llm4d_pv_kind;

typedef struct llm4d_pv {
    llm4d_pv_kind kind;
    long long i;            /* BOOL (0/1) and INT */
    double f;               /* FLOAT */
    char *s;                /* STR, owned */
    int n;                  /* LIST length */
    struct llm4d_pv *items; /* LIST items, owned */
} llm4d_pv;

/* Python's ast.literal_eval on `text` (numbers, True/False/None, quoted strings, lists, tuples including a bare
 * "1,2,3"). Returns 1 and fills *out when text is such a literal, 0 when it is not (out is then NONE), -1 when
 * memory ran out. */
int llm4d_pv_literal(const char *text, llm4d_pv *out);

/* literal_eval with the fallback PaddleFleetX uses: anything that is not a literal is kept as a string.
 * Returns 0, or -1 when memory ran out. */
int llm4d_pv_from_text(const char *text, llm4d_pv *out);

/* A YAML scalar as PyYAML + literal_eval would deliver it: `plain` is 1 for an unquoted scalar, whose empty/~/null
 * spellings mean None and whose YAML 1.1 booleans (yes/no/on/off/true/false) are resolved first. */
int llm4d_pv_from_yaml_scalar(const char *text, int plain, llm4d_pv *out);

/* Python-like repr ("True", "1e-05", "'abc'", "[949, 50, 1]") into buf; used in messages and to compare values. */
void llm4d_pv_repr(const llm4d_pv *v, char *buf, size_t n);

/* Deep copy; returns 0 or -1 when memory ran out. */
int llm4d_pv_copy(llm4d_pv *dst, const llm4d_pv *src);

void llm4d_pv_free(llm4d_pv *v);

#endif
