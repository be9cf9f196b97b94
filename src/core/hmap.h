/* hmap.h — a hash index of entries that stay where they are, for the planner's memos.
 *
 * The memos of a large search (the priced traces of plan/stagecost.c, the memory plan's model parts of
 * plan/memplan.c) hold tens of thousands of entries of kilobytes each. Kept inline in an open-addressing table they
 * moved on every doubling and made the kernel fault in fresh pages again and again (GPT-3 175B over 1024 hosts:
 * 1.1 million page faults, a sixth of the answer's time). Here the table holds only (hash, entry pointer) pairs,
 * linear probing, doubled past half full; an entry is allocated once by its owner and never moves, so a pointer to it
 * stays valid while the memo lives. */
#ifndef LLM4D_CORE_HMAP_H
#define LLM4D_CORE_HMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t h;
    void *e; /* NULL: empty */
} llm4d_hslot;

typedef struct {
    llm4d_hslot *s;
    size_t cap, n; /* cap: a power of two */
} llm4d_hmap;

/* An empty index of cap slots (a power of two); 0 when out of memory. */
int llm4d_hmap_init(llm4d_hmap *m, size_t cap);
/* Frees the index, not the entries (walk m->s first). */
void llm4d_hmap_free(llm4d_hmap *m);
/* Forgets every entry (not freed: walk m->s first), keeping the slots. */
void llm4d_hmap_clear(llm4d_hmap *m);
/* The slot of the entry with hash h that same(entry, key) accepts, or the empty slot where it belongs: the caller then
 * stores its new entry there (s->h = h, s->e = entry) and counts it (m->n++). NULL when growing ran out of memory. */
llm4d_hslot *llm4d_hmap_find(llm4d_hmap *m, uint64_t h, int (*same)(const void *entry, const void *key),
                             const void *key);
/* A key of n int64 words hashed (FNV-1a by word, finished so that the low bits depend on every bit). */
uint64_t llm4d_hmap_hash(const int64_t *k, size_t n);

#endif
