/* explain.c — rejected layouts grouped by reason, counted and bounded (see explain.h). */
#include "plan/explain.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "plan/layout.h"

static const char *kind_of(int status) {
    return status == LLM4D_CAND_MEMORY ? "does not fit memory" : status == LLM4D_CAND_ERROR ? "refused" : "invalid";
}

/* The grouping key: the kind, then the message with every number (digits, with a decimal point inside) as '#'. */
static char *key_of(const llm4d_candidate *c) {
    const char *m = c->reason ? c->reason : "?", *k = kind_of(c->status);
    const size_t n = strlen(k) + strlen(m) + 2;
    char *out = malloc(n), *o = out;
    if (!out) return NULL;
    for (const char *p = k; *p;) *o++ = *p++;
    *o++ = '|';
    for (const char *p = m; *p;) {
        if (isdigit((unsigned char)*p)) {
            while (isdigit((unsigned char)*p) || (*p == '.' && isdigit((unsigned char)p[1]))) p++;
            *o++ = '#';
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return out;
}

typedef struct {
    char *key;
    int i;
} keyed;

static int by_key(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    const int c = strcmp(x->key, y->key);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

static int by_count(const void *a, const void *b) {
    const llm4d_reason_group *x = a, *y = b;
    if (x->count != y->count) return x->count < y->count ? 1 : -1;
    return (x->first > y->first) - (x->first < y->first);
}

void llm4d_reasons_free(llm4d_reasons *r) {
    for (int i = 0; i < r->n; i++) free(r->g[i].which);
    free(r->g);
    r->g = NULL, r->n = 0;
}

llm4d_code llm4d_reasons_group(const llm4d_search *s, llm4d_reasons *out, llm4d_err *err) {
    out->g = NULL, out->n = 0;
    const int n = s->n - s->n_fit;
    if (n <= 0) return LLM4D_OK;
    keyed *k = calloc((size_t)n, sizeof *k);
    llm4d_code rc = k ? LLM4D_OK : llm4d_fail(err, LLM4D_ENOMEM, "out of memory grouping the rejections");
    for (int j = 0; rc == LLM4D_OK && j < n; j++) {
        k[j].i = s->n_fit + j;
        if (!(k[j].key = key_of(&s->c[k[j].i])))
            rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory grouping the rejections");
    }
    if (rc == LLM4D_OK) {
        qsort(k, (size_t)n, sizeof *k, by_key);
        int groups = 0;
        for (int j = 0; j < n; j++) groups += j == 0 || strcmp(k[j].key, k[j - 1].key);
        out->g = calloc((size_t)groups, sizeof *out->g);
        if (!out->g) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory grouping the rejections");
        for (int j = 0, e; rc == LLM4D_OK && j < n; j = e) {
            for (e = j + 1; e < n && !strcmp(k[e].key, k[j].key); e++) {}
            llm4d_reason_group *g = &out->g[out->n++];
            g->count = e - j, g->first = k[j].i; /* sorted by index within a key: the earliest */
            snprintf(g->kind, sizeof g->kind, "%s", kind_of(s->c[g->first].status));
            if (!(g->which = malloc((size_t)g->count * sizeof *g->which))) {
                rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory grouping the rejections");
                break;
            }
            for (int q = j; q < e; q++) g->which[q - j] = k[q].i;
        }
        if (rc == LLM4D_OK) qsort(out->g, (size_t)out->n, sizeof *out->g, by_count);
    }
    for (int j = 0; k && j < n; j++) free(k[j].key);
    free(k);
    if (rc != LLM4D_OK) llm4d_reasons_free(out);
    return rc;
}

static const char *reason_of(const llm4d_search *s, int i) { return s->c[i].reason ? s->c[i].reason : "?"; }

void llm4d_reasons_summary(FILE *f, const llm4d_search *s, const llm4d_reasons *r) {
    fprintf(f, "rejected %d layout%s for %d reason%s (each reason's count, and one of its layouts' message: the "
            "numbers differ between layouts):\n", s->n - s->n_fit, s->n - s->n_fit == 1 ? "" : "s", r->n,
            r->n == 1 ? "" : "s");
    for (int i = 0; i < r->n; i++)
        fprintf(f, "  %9d  %s: %s\n", r->g[i].count, r->g[i].kind, reason_of(s, r->g[i].first));
}

void llm4d_reasons_detail(FILE *f, const llm4d_search *s, const llm4d_reasons *r, int limit) {
    fprintf(f, "rejected layouts by reason (%s; --explain_lines N bounds them, 0: all):\n",
            limit > 0 ? "at most --explain_lines per reason" : "all");
    for (int i = 0; i < r->n; i++) {
        const llm4d_reason_group *g = &r->g[i];
        fprintf(f, "  %s (%d):\n", g->kind, g->count);
        const int shown = limit > 0 && g->count > limit ? limit : g->count;
        for (int j = 0; j < shown; j++) {
            char name[160];
            llm4d_layout_name(&s->c[g->which[j]].layout, name, sizeof name);
            fprintf(f, "    %-34s %s\n", name, reason_of(s, g->which[j]));
        }
        if (shown < g->count) fprintf(f, "    ... and %d more for this reason\n", g->count - shown);
    }
}

cJSON *llm4d_reasons_json(const llm4d_search *s, const llm4d_reasons *r) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < r->n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", r->g[i].kind);
        cJSON_AddNumberToObject(o, "count", r->g[i].count);
        cJSON_AddStringToObject(o, "example", reason_of(s, r->g[i].first));
        char name[160];
        llm4d_layout_name(&s->c[r->g[i].first].layout, name, sizeof name);
        cJSON_AddStringToObject(o, "example_layout", name);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}
