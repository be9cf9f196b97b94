/* tokenizer_impl.h — the inside of the byte-level BPE tokenizer, shared by its two loaders: tokenizer.c (GPT-2's
 * encoder.json + vocab.bpe, and the BPE engine, the workers, encode and decode) and tokenizer_json.c (a Hugging Face
 * tokenizer.json). Both fill the same struct: token bytes by id, the byte -> id table and the merge table; the BPE
 * merges, the per-worker cache and decode are one code for both. Not part of the public API (data/tokenizer.h). */
#ifndef LLM4D_DATA_TOKENIZER_IMPL_H
#define LLM4D_DATA_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <string.h>

#include "data/tokenizer.h"

#define LLM4D_TOK_MAX_SPLITS 8 /* a tokenizer.json's regex pre-tokenizers (DeepSeek V3 has 3, then ByteLevel) */
#define LLM4D_TOK_PAIR_EMPTY UINT64_MAX

/* an added token of a tokenizer.json (split out of the text before pre-tokenization) */
typedef struct {
    const char *content; /* points into added_blob, NUL-terminated */
    size_t len;
    int32_t id;
    int normalized; /* tokenizer.json's "normalized": such tokens are looked for in a second pass, as HF does */
} llm4d_tok_added;

struct llm4d_tokenizer {
    int32_t vocab_size;
    int32_t eos; /* -1: the vocabulary has none (a tokenizer.json without a known end-of-text token) */
    int32_t byte_id[256];
    char *tok_blob;     /* the bytes of every token, back to back */
    uint32_t *tok_off;  /* vocab_size + 1 offsets into tok_blob */
    uint64_t *pair_key; /* (a << 32 | b), LLM4D_TOK_PAIR_EMPTY when unused */
    int32_t *pair_rank;
    int32_t *pair_merged;
    uint64_t pair_mask; /* capacity - 1 (capacity a power of two) */
    pcre2_code *re;     /* GPT-2 files: the pre-tokenizer regex; NULL for a tokenizer.json */

    /* a tokenizer.json only (all zero for GPT-2's files, whose path does not look at them) */
    int hf;
    unsigned char *hole;     /* ids no token has (decode rejects them); NULL when every id has a token */
    int32_t *piece_slot;     /* ignore_merges: model-vocabulary bytes -> id (open addressing, -1 empty) */
    uint64_t piece_mask;
    int add_prefix_space;    /* ByteLevel's: a piece not starting with ' ' gets one, before ByteLevel's regex */
    int n_splits;            /* regex pre-tokenizers applied in turn, each to the pieces of the one before */
    int prefix_level;        /* the ByteLevel's place in that chain (its own regex, if any, comes after) */
    pcre2_code *split[LLM4D_TOK_MAX_SPLITS];
    llm4d_tok_added *added;  /* in the file's order; the longest match is found by scanning them all */
    int n_added;
    char *added_blob;
    unsigned char added_first[2][256]; /* [normalized][byte]: some added token of that pass starts with it */
};

typedef struct {
    uint64_t hash;
    uint32_t key_off, key_len, ids_off, n_ids; /* key_len == 0: empty slot */
} llm4d_tok_cache_slot;

struct llm4d_tokenizer_worker {
    const llm4d_tokenizer *t;
    pcre2_match_data *md;
    pcre2_match_data *md_split[LLM4D_TOK_MAX_SPLITS];
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    llm4d_tok_cache_slot *slots;
    size_t n_cached;
    char *keys;
    size_t keys_n, keys_cap;
    llm4d_ids cached_ids;
    llm4d_ids scratch;
    char *pbuf; /* a piece with ByteLevel's prefix space */
    size_t pbuf_cap;
};

static inline uint64_t llm4d_tok_hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* Decode one UTF-8 code point from valid input; returns its length. */
static inline size_t llm4d_tok_utf8_decode(const unsigned char *s, uint32_t *cp) {
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (s[0] < 0xE0) {
        *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (s[0] < 0xF0) {
        *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
          (s[3] & 0x3F);
    return 4;
}

/* Read a whole regular file; errors are user errors "<what> <path> ...: <hint>". */
llm4d_code llm4d_tok_read_file(const char *path, const char *what, const char *hint, char **data, size_t *len,
                               llm4d_err *err);
/* GPT-2's bytes_to_unicode(), inverted: code point -> byte, -1 for code points outside the alphabet. */
void llm4d_tok_byte_alphabet(int cp_to_byte[324]);
/* Token string (UTF-8 over the byte alphabet) -> raw bytes into out (at most len bytes); returns the byte count or
 * -1 if a character is outside the alphabet or the string is not UTF-8. */
long llm4d_tok_token_to_bytes(const char *s, size_t len, const int cp_to_byte[324], unsigned char *out);
/* The id whose bytes are b[0..n) in an open-addressing table over ids (slot -1 = empty), or -1. */
int32_t llm4d_tok_map_find(const int32_t *slot, uint64_t mask, const llm4d_tokenizer *t, const void *b, size_t n);
/* Record merge (a, b) -> merged at rank in the pair table (allocated by the loader, all keys EMPTY). */
void llm4d_tok_pair_insert(llm4d_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged);
/* BPE one pre-tokenized piece (through the worker's cache) and append its ids. */
llm4d_code llm4d_tok_encode_piece(llm4d_tokenizer_worker *w, const unsigned char *p, size_t n, llm4d_ids *out,
                                  llm4d_err *err);

/* tokenizer_json.c: load a tokenizer.json (path of the file) into a zeroed t; encode for such a tokenizer. */
llm4d_code llm4d_tok_json_load(llm4d_tokenizer *t, const char *path, llm4d_err *err);
llm4d_code llm4d_tok_json_encode(llm4d_tokenizer_worker *w, const char *text, size_t len, llm4d_ids *out,
                                 llm4d_err *err);

#endif
