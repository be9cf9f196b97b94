/* hmap.c — the planner memos' hash index (see hmap.h). */
#include "core/hmap.h"

#include <stdlib.h>
#include <string.h>

int llm4d_hmap_init(llm4d_hmap *m, size_t cap) {
    m->s = calloc(cap, sizeof *m->s);
    m->cap = m->s ? cap : 0, m->n = 0;
    return m->s != NULL;
}

void llm4d_hmap_free(llm4d_hmap *m) {
    free(m->s);
    memset(m, 0, sizeof *m);
}

void llm4d_hmap_clear(llm4d_hmap *m) {
    memset(m->s, 0, m->cap * sizeof *m->s);
    m->n = 0;
}

static int grow(llm4d_hmap *m) {
    const size_t cap = 2 * m->cap;
    llm4d_hslot *ns = calloc(cap, sizeof *ns);
    if (!ns) return 0;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->s[i].e) continue;
        size_t j = m->s[i].h & (cap - 1);
        while (ns[j].e) j = (j + 1) & (cap - 1);
        ns[j] = m->s[i];
    }
    free(m->s);
    m->s = ns, m->cap = cap;
    return 1;
}

llm4d_hslot *llm4d_hmap_find(llm4d_hmap *m, uint64_t h, int (*same)(const void *entry, const void *key),
                             const void *key) {
    if (2 * (m->n + 1) > m->cap && !grow(m)) return NULL;
    size_t j = h & (m->cap - 1);
    while (m->s[j].e && (m->s[j].h != h || !same(m->s[j].e, key))) j = (j + 1) & (m->cap - 1);
    return &m->s[j];
}

uint64_t llm4d_hmap_hash(const int64_t *k, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint64_t)k[i]) * 1099511628211ull;
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33;
    return h;
}
