/* hash.h — FNV-1a over 32-bit words: a cheap fingerprint of a float buffer's exact bits (tests compare the
 * parameters of replicas with it). */
#ifndef LLM4D_CORE_HASH_H
#define LLM4D_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define LLM4D_HASH_INIT 1469598103934665603ull

/* h continued over n_words more words (start from LLM4D_HASH_INIT) */
static inline uint64_t llm4d_hash_more(uint64_t h, const void *buf, size_t n_words) {
    const uint32_t *w = buf;
    for (size_t i = 0; i < n_words; i++) h = (h ^ w[i]) * 1099511628211ull;
    return h;
}

static inline uint64_t llm4d_hash_words(const void *buf, size_t n_words) {
    return llm4d_hash_more(LLM4D_HASH_INIT, buf, n_words);
}

#endif
