/* tokenizer_json.c — a Hugging Face tokenizer.json (the `tokenizers` library's format) for byte-level BPE models,
 * GPT-2's and Llama 3's, so that a user with such weights on disk can tokenize a corpus for them.
 *
 * What is read, as `tokenizers` reads it: model.type "BPE" with model.vocab {token: id} and model.merges in either
 * spelling (["a b", ...] or [["a", "b"], ...]), rank = position; model.ignore_merges (Llama 3: a piece that is itself
 * a vocabulary entry is that one token, unmerged); added_tokens [{id, content, normalized, ...}]; pre_tokenizer
 * ByteLevel (GPT-2's regex when use_regex, add_prefix_space honoured) or a Sequence of Split (a Regex or String
 * pattern, behavior "Isolated", not inverted) ending with one ByteLevel; decoder ByteLevel. Anything else (a
 * SentencePiece/Metaspace model such as Llama 2's, WordPiece, Unigram, a normalizer, BPE dropout or byte_fallback,
 * added tokens with lstrip/rstrip/single_word) is a user error naming it, never a different tokenization.
 *
 * Encoding follows tokenizers' order: added tokens (special or not) found in the text are split out first, leftmost
 * longest, those with normalized false before those with normalized true, and become their ids; each remaining
 * piece goes through the Split regexes in turn (each match and each gap between matches is a piece), ByteLevel's
 * prefix space and regex, then the shared BPE engine of tokenizer.c. This differs from the GPT-2 files' path
 * (encoder.json + vocab.bpe), which follows gpt-3-encoder and encoder.py and treats a literal `<|endoftext|>` in the
 * text as text; that path is unchanged. The post_processor is not applied: ids are what tokenizers' encode(text,
 * add_special_tokens=False) gives (no <|begin_of_text|> in front for Llama 3). Decode maps a token's characters
 * through the byte alphabet, or, as tokenizers' ByteLevel decoder does, gives its UTF-8 as is when a character is
 * outside it (an added token like "<|reserved special token 0|>").
 *
 * The regexes run in PCRE2 (UTF + Unicode properties) where tokenizers runs Oniguruma: the same syntax for these
 * patterns; \s differs on U+180E only (PCRE2 10.42 counts it as space), and \p{L}/\p{N} follow each library's
 * Unicode version. The end-of-document token is the first of <|end_of_text|>, <|endoftext|>, </s>, <eos> that the
 * file has (none: append-eos is refused). Token ids must be below 2^24 (no released vocabulary comes near). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_impl.h"

#define MAX_VOCAB (1 << 24)
#define WHAT "byte-level BPE tokenizer.json (GPT-2's, Llama 3's)"

/* tokenizers' ByteLevel regex (pre_tokenizers/byte_level.rs): GPT-2's pattern with the library's \s */
static const char bytelevel_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char *const eos_names[] = {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>"};

static const cJSON *get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static const char *type_of(const cJSON *o) {
    const cJSON *t = get(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static int flag(const cJSON *o, const char *key, int dflt) {
    const cJSON *v = get(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* a JSON number that is an id: an integer in [0, MAX_VOCAB), else -1 */
static int32_t id_of(const cJSON *v) {
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    return d >= 0 && d < MAX_VOCAB && (double)(int32_t)d == d ? (int32_t)d : -1;
}

static llm4d_code add_split(llm4d_tokenizer *t, const char *path, const char *pattern, int literal, llm4d_err *err) {
    if (t->n_splits == LLM4D_TOK_MAX_SPLITS)
        return llm4d_fail(err, LLM4D_EUSER, "%s: more than %d regex pre-tokenizers (llm4d's limit)", path,
                          LLM4D_TOK_MAX_SPLITS - 1);
    int ecode;
    PCRE2_SIZE eoff;
    /* PCRE2_LITERAL admits no UCP (nor needs it) */
    uint32_t opts = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &ecode, &eoff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ecode, msg, sizeof msg);
        return llm4d_fail(err, LLM4D_EUSER, "%s: the pre_tokenizer regex \"%.80s\" does not compile with PCRE2 (%s at "
                          "offset %zu)", path, pattern, (const char *)msg, (size_t)eoff);
    }
    /* JIT is an optimisation: without it (an unsupported CPU) pcre2_match interprets the pattern */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    t->split[t->n_splits++] = re;
    return LLM4D_OK;
}

static llm4d_code unsupported(const char *path, const char *what, const char *name, llm4d_err *err) {
    const char *why = !strcmp(name, "Metaspace")   ? " (SentencePiece-style, as Llama 2's)"
                      : !strcmp(name, "Unigram")   ? " (a SentencePiece unigram model)"
                      : !strcmp(name, "WordPiece") ? " (a BERT model)"
                                                   : "";
    return llm4d_fail(err, LLM4D_EUSER, "%s: %s %s%s is not supported: llm4d reads a " WHAT, path, what, name, why);
}

/* pre_tokenizer: ByteLevel, or a Sequence of Splits ending with ByteLevel */
static llm4d_code parse_pre(llm4d_tokenizer *t, const char *path, const cJSON *pre, llm4d_err *err) {
    const char *type = type_of(pre);
    if (!type) return llm4d_fail(err, LLM4D_EUSER, "%s has no pre_tokenizer: llm4d reads a " WHAT, path);
    const cJSON *list = pre;
    if (!strcmp(type, "Sequence")) {
        list = get(pre, "pretokenizers");
        if (!cJSON_IsArray(list)) return llm4d_fail(err, LLM4D_EUSER, "%s: pre_tokenizer Sequence has no list", path);
    }
    int seen_bytelevel = 0;
    for (const cJSON *it = list == pre ? pre : list->child; it; it = list == pre ? NULL : it->next) {
        const char *ty = type_of(it);
        if (!ty) return llm4d_fail(err, LLM4D_EUSER, "%s: a pre_tokenizer has no type", path);
        if (seen_bytelevel)
            return llm4d_fail(err, LLM4D_EUSER, "%s: pre_tokenizer %s after ByteLevel is not supported: llm4d reads "
                              "a " WHAT, path, ty);
        if (!strcmp(ty, "ByteLevel")) {
            seen_bytelevel = 1;
            t->prefix_level = t->n_splits;
            t->add_prefix_space = flag(it, "add_prefix_space", 1);
            if (flag(it, "use_regex", 1)) LLM4D_TRY(add_split(t, path, bytelevel_pattern, 0, err));
        } else if (!strcmp(ty, "Split")) {
            const cJSON *pat = get(it, "pattern"), *beh = get(it, "behavior");
            const cJSON *rx = get(pat, "Regex"), *str = get(pat, "String");
            if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") || flag(it, "invert", 0))
                return llm4d_fail(err, LLM4D_EUSER, "%s: a Split pre_tokenizer with behavior %s%s is not supported "
                                  "(llm4d implements \"Isolated\", not inverted)", path,
                                  cJSON_IsString(beh) ? beh->valuestring : "(none)",
                                  flag(it, "invert", 0) ? ", inverted," : "");
            if (!cJSON_IsString(rx) && !cJSON_IsString(str))
                return llm4d_fail(err, LLM4D_EUSER, "%s: a Split pre_tokenizer has no Regex or String pattern", path);
            LLM4D_TRY(add_split(t, path, cJSON_IsString(rx) ? rx->valuestring : str->valuestring,
                                !cJSON_IsString(rx), err));
        } else {
            return unsupported(path, "pre_tokenizer", ty, err);
        }
    }
    if (!seen_bytelevel)
        return llm4d_fail(err, LLM4D_EUSER, "%s: the pre_tokenizer has no ByteLevel step, so this is not a byte-level "
                          "BPE: llm4d reads a " WHAT, path);
    return LLM4D_OK;
}

/* model: BPE without the options that change what encode gives (dropout, byte fallback, word affixes) */
static llm4d_code check_model(const char *path, const cJSON *model, llm4d_err *err) {
    const char *type = type_of(model);
    if (!cJSON_IsObject(model)) return llm4d_fail(err, LLM4D_EUSER, "%s has no model: not a tokenizer.json", path);
    if (!type) return llm4d_fail(err, LLM4D_EUSER, "%s: the model has no type: llm4d reads a " WHAT, path);
    if (strcmp(type, "BPE")) return unsupported(path, "model type", type, err);
    const cJSON *drop = get(model, "dropout"), *pre = get(model, "continuing_subword_prefix"),
                *suf = get(model, "end_of_word_suffix");
    if (cJSON_IsNumber(drop) && drop->valuedouble != 0)
        return llm4d_fail(err, LLM4D_EUSER, "%s: BPE dropout %g is not supported (encoding would be random)", path,
                          drop->valuedouble);
    if ((cJSON_IsString(pre) && *pre->valuestring) || (cJSON_IsString(suf) && *suf->valuestring))
        return llm4d_fail(err, LLM4D_EUSER, "%s: a BPE with continuing_subword_prefix or end_of_word_suffix is not "
                          "supported: llm4d reads a " WHAT, path);
    if (flag(model, "byte_fallback", 0))
        return llm4d_fail(err, LLM4D_EUSER, "%s: a BPE with byte_fallback (SentencePiece-style, as Llama 2's) is not "
                          "supported: llm4d reads a " WHAT, path);
    if (!cJSON_IsObject(get(model, "vocab")) || !cJSON_IsArray(get(model, "merges")))
        return llm4d_fail(err, LLM4D_EUSER, "%s: the BPE model has no vocab object or merges list", path);
    return LLM4D_OK;
}

/* The token strings by id (keys), which of them are the model's vocabulary (in_vocab), and the vocabulary size. */
static llm4d_code collect_ids(llm4d_tokenizer *t, const char *path, const cJSON *vocab, const cJSON *added,
                              const char ***keys_out, unsigned char **in_vocab_out, llm4d_err *err) {
    int32_t max_id = -1;
    for (const cJSON *it = vocab->child; it; it = it->next) {
        int32_t id = id_of(it);
        if (id < 0)
            return llm4d_fail(err, LLM4D_EUSER, "%s: vocabulary token \"%.40s\" has id %s (want an integer in [0, "
                              "2^24))", path, it->string, cJSON_IsNumber(it) ? "out of range" : "that is no number");
        if (id > max_id) max_id = id;
    }
    for (const cJSON *it = added ? added->child : NULL; it; it = it->next) {
        int32_t id = id_of(get(it, "id"));
        if (id < 0 || !cJSON_IsString(get(it, "content")) || !*get(it, "content")->valuestring)
            return llm4d_fail(err, LLM4D_EUSER, "%s: an added token lacks an id in [0, 2^24) or a content", path);
        if (id > max_id) max_id = id;
    }
    if (max_id < 255) return llm4d_fail(err, LLM4D_EUSER, "%s: the vocabulary has fewer than 256 tokens", path);
    t->vocab_size = max_id + 1;
    const char **keys = calloc((size_t)t->vocab_size, sizeof *keys);
    unsigned char *in_vocab = calloc((size_t)t->vocab_size, 1);
    *keys_out = keys;
    *in_vocab_out = in_vocab;
    if (!keys || !in_vocab) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory loading %s", path);
    for (const cJSON *it = vocab->child; it; it = it->next) {
        int32_t id = id_of(it);
        if (keys[id])
            return llm4d_fail(err, LLM4D_EUSER, "%s: tokens \"%.40s\" and \"%.40s\" have the same id %d", path,
                              keys[id], it->string, id);
        keys[id] = it->string;
        in_vocab[id] = 1;
    }
    for (const cJSON *it = added ? added->child : NULL; it; it = it->next) {
        int32_t id = id_of(get(it, "id"));
        const char *content = get(it, "content")->valuestring;
        if (flag(it, "lstrip", 0) || flag(it, "rstrip", 0) || flag(it, "single_word", 0))
            return llm4d_fail(err, LLM4D_EUSER, "%s: added token \"%.40s\" sets lstrip, rstrip or single_word, which "
                              "llm4d does not implement", path, content);
        if (keys[id] && (!in_vocab[id] || strcmp(keys[id], content)))
            return llm4d_fail(err, LLM4D_EUSER, "%s: added token \"%.40s\" has id %d, which is \"%.40s\"'s", path,
                              content, id, keys[id]);
        keys[id] = content;
    }
    return LLM4D_OK;
}

/* every character of s is in the byte alphabet (then its bytes and a vocabulary token's compare as strings do) */
static int in_alphabet(const char *s, const int cp_to_byte[324]) {
    for (size_t i = 0; s[i];) {
        uint32_t cp;
        i += llm4d_tok_utf8_decode((const unsigned char *)s + i, &cp);
        if (cp >= 324 || cp_to_byte[cp] < 0) return 0;
    }
    return 1;
}

/* Token bytes by id: the byte alphabet undone; an added token outside it keeps its UTF-8 (tokenizers' decoder). */
static llm4d_code lay_out_tokens(llm4d_tokenizer *t, const char *path, const char **keys,
                                 const unsigned char *in_vocab, const int cp_to_byte[324], llm4d_err *err) {
    size_t blob = 0;
    int holes = 0;
    for (int32_t id = 0; id < t->vocab_size; id++) {
        blob += keys[id] ? strlen(keys[id]) : 0;
        holes |= !keys[id];
    }
    t->tok_off = calloc((size_t)t->vocab_size + 1, sizeof *t->tok_off);
    t->tok_blob = malloc(blob + 1);
    if (holes) t->hole = calloc((size_t)t->vocab_size, 1);
    if (!t->tok_off || !t->tok_blob || (holes && !t->hole))
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory loading %s", path);
    size_t off = 0;
    for (int32_t id = 0; id < t->vocab_size; id++) {
        t->tok_off[id] = (uint32_t)off;
        if (!keys[id]) {
            t->hole[id] = 1;
            continue;
        }
        size_t kl = strlen(keys[id]);
        long nb = llm4d_tok_token_to_bytes(keys[id], kl, cp_to_byte, (unsigned char *)t->tok_blob + off);
        if (nb <= 0 && in_vocab[id])
            return llm4d_fail(err, LLM4D_EUSER, "%s: vocabulary token \"%.40s\" (id %d) is not in the byte-level "
                              "alphabet: llm4d reads a " WHAT, path, keys[id], id);
        if (nb < 0) memcpy(t->tok_blob + off, keys[id], kl);
        off += nb < 0 ? kl : (size_t)nb;
    }
    t->tok_off[t->vocab_size] = (uint32_t)off;
    return LLM4D_OK;
}

/* The merges in either spelling; each (a, b) and a + b must be vocabulary tokens. */
static llm4d_code load_merges(llm4d_tokenizer *t, const char *path, const cJSON *merges, const int32_t *slot,
                              uint64_t mask, const int cp_to_byte[324], llm4d_err *err) {
    int n = cJSON_GetArraySize(merges);
    uint64_t cap = 4;
    while (cap < 2 * (uint64_t)n + 2) cap <<= 1;
    t->pair_mask = cap - 1;
    t->pair_key = malloc(cap * sizeof *t->pair_key);
    t->pair_rank = malloc(cap * sizeof *t->pair_rank);
    t->pair_merged = malloc(cap * sizeof *t->pair_merged);
    if (!t->pair_key || !t->pair_rank || !t->pair_merged)
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory loading %s", path);
    for (uint64_t i = 0; i < cap; i++) t->pair_key[i] = LLM4D_TOK_PAIR_EMPTY;
    unsigned char *buf = NULL;
    size_t buf_cap = 0;
    llm4d_code rc = LLM4D_OK;
    int32_t rank = 0;
    for (const cJSON *m = merges->child; m && rc == LLM4D_OK; m = m->next, rank++) {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if (cJSON_IsString(m)) { /* "a b": tokens of a byte-level vocabulary hold no space */
            const char *sp = strchr(m->valuestring, ' ');
            if (sp && !strchr(sp + 1, ' ')) a = m->valuestring, la = (size_t)(sp - a), b = sp + 1, lb = strlen(b);
        } else if (cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            a = m->child->valuestring, la = strlen(a), b = m->child->next->valuestring, lb = strlen(b);
        }
        if (!a || !la || !lb) {
            rc = llm4d_fail(err, LLM4D_EUSER, "%s: merge %d is not two tokens (\"a b\" or [\"a\", \"b\"])", path,
                            rank + 1);
            break;
        }
        if (2 * (la + lb) > buf_cap) {
            unsigned char *nb = realloc(buf, 2 * (la + lb));
            if (!nb) {
                rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory loading %s", path);
                break;
            }
            buf = nb;
            buf_cap = 2 * (la + lb);
        }
        long ba = llm4d_tok_token_to_bytes(a, la, cp_to_byte, buf);
        long bb = ba > 0 ? llm4d_tok_token_to_bytes(b, lb, cp_to_byte, buf + ba) : -1;
        int32_t ia = ba > 0 ? llm4d_tok_map_find(slot, mask, t, buf, (size_t)ba) : -1;
        int32_t ib = bb > 0 ? llm4d_tok_map_find(slot, mask, t, buf + ba, (size_t)bb) : -1;
        int32_t im = ia >= 0 && ib >= 0 ? llm4d_tok_map_find(slot, mask, t, buf, (size_t)(ba + bb)) : -1;
        if (im < 0)
            rc = llm4d_fail(err, LLM4D_EUSER, "%s: merge %d (\"%.*s\" \"%.*s\") names a token that is not in the "
                            "vocabulary", path, rank + 1, (int)(la < 40 ? la : 40), a, (int)(lb < 40 ? lb : 40), b);
        else
            llm4d_tok_pair_insert(t, ia, ib, rank, im);
    }
    free(buf);
    return rc;
}

static llm4d_code load_added(llm4d_tokenizer *t, const char *path, const cJSON *added, llm4d_err *err) {
    int n = cJSON_GetArraySize(added);
    size_t blob = 0;
    for (const cJSON *it = added ? added->child : NULL; it; it = it->next)
        blob += strlen(get(it, "content")->valuestring) + 1;
    t->added = calloc((size_t)n + 1, sizeof *t->added);
    t->added_blob = malloc(blob + 1);
    if (!t->added || !t->added_blob) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory loading %s", path);
    size_t off = 0;
    for (const cJSON *it = added ? added->child : NULL; it; it = it->next) {
        const char *c = get(it, "content")->valuestring;
        llm4d_tok_added *a = &t->added[t->n_added++];
        a->len = strlen(c);
        a->content = memcpy(t->added_blob + off, c, a->len + 1);
        a->id = id_of(get(it, "id"));
        /* tokenizers' AddedToken: normalized defaults to !special */
        a->normalized = flag(it, "normalized", !flag(it, "special", 0));
        t->added_first[a->normalized][(unsigned char)c[0]] = 1;
        off += a->len + 1;
    }
    return LLM4D_OK;
}

llm4d_code llm4d_tok_json_load(llm4d_tokenizer *t, const char *path, llm4d_err *err) {
    char *text;
    size_t len;
    LLM4D_TRY(llm4d_tok_read_file(path, "tokenizer file", "give a Hugging Face tokenizer.json (or a directory holding "
                                  "one) to --vocab_dir", &text, &len, err));
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return llm4d_fail(err, LLM4D_EUSER, "%s is not a JSON object (corrupt or truncated): not a tokenizer.json",
                          path);
    }
    const cJSON *model = get(root, "model"), *added = get(root, "added_tokens"), *norm = get(root, "normalizer");
    const cJSON *dec = get(root, "decoder");
    const char **keys = NULL;
    unsigned char *in_vocab = NULL;
    int32_t *slot = NULL;
    int cp_to_byte[324];
    llm4d_tok_byte_alphabet(cp_to_byte);
    t->hf = 1;
    t->eos = -1;
    llm4d_code rc = check_model(path, model, err);
    if (rc == LLM4D_OK && norm && !cJSON_IsNull(norm))
        rc = unsupported(path, "normalizer", type_of(norm) ? type_of(norm) : "(untyped)", err);
    if (rc == LLM4D_OK) rc = parse_pre(t, path, get(root, "pre_tokenizer"), err);
    if (rc == LLM4D_OK && (!type_of(dec) || strcmp(type_of(dec), "ByteLevel")))
        rc = unsupported(path, "decoder", type_of(dec) ? type_of(dec) : "(none)", err);
    if (rc == LLM4D_OK && added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        rc = llm4d_fail(err, LLM4D_EUSER, "%s: added_tokens is not a list", path);
    if (added && !cJSON_IsArray(added)) added = NULL;
    if (rc == LLM4D_OK) rc = collect_ids(t, path, get(model, "vocab"), added, &keys, &in_vocab, err);
    if (rc == LLM4D_OK) rc = lay_out_tokens(t, path, keys, in_vocab, cp_to_byte, err);
    /* model vocabulary bytes -> id: the merges' tokens, the bytes' ids and, with ignore_merges, whole pieces */
    uint64_t cap = 1;
    while (rc == LLM4D_OK && cap < 2 * (uint64_t)t->vocab_size) cap <<= 1;
    if (rc == LLM4D_OK && !(slot = malloc(cap * sizeof *slot)))
        rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory loading %s", path);
    if (rc == LLM4D_OK) {
        memset(slot, 0xff, cap * sizeof *slot);
        for (int32_t id = 0; id < t->vocab_size; id++) {
            if (!in_vocab[id]) continue;
            uint64_t h = llm4d_tok_hash_bytes(t->tok_blob + t->tok_off[id], t->tok_off[id + 1] - t->tok_off[id]);
            for (h &= cap - 1; slot[h] >= 0; h = (h + 1) & (cap - 1)) {}
            slot[h] = id;
        }
        for (int b = 0; b < 256 && rc == LLM4D_OK; b++) {
            unsigned char c = (unsigned char)b;
            if ((t->byte_id[b] = llm4d_tok_map_find(slot, cap - 1, t, &c, 1)) < 0)
                rc = llm4d_fail(err, LLM4D_EUSER, "%s: the vocabulary lacks the token of byte %d: llm4d reads a "
                                WHAT, path, b);
        }
    }
    if (rc == LLM4D_OK) rc = load_merges(t, path, get(model, "merges"), slot, cap - 1, cp_to_byte, err);
    for (const cJSON *it = added ? added->child : NULL; rc == LLM4D_OK && it; it = it->next) {
        /* an added token that is also a vocabulary entry must have the entry's id (tokenizers would use that id) */
        int32_t id = id_of(get(it, "id"));
        int32_t vid = llm4d_tok_map_find(slot, cap - 1, t, t->tok_blob + t->tok_off[id],
                                         t->tok_off[id + 1] - t->tok_off[id]);
        if (vid >= 0 && vid != id && in_alphabet(get(it, "content")->valuestring, cp_to_byte))
            rc = llm4d_fail(err, LLM4D_EUSER, "%s: added token \"%.40s\" has id %d but the vocabulary gives it %d",
                            path, get(it, "content")->valuestring, id, vid);
    }
    if (rc == LLM4D_OK) rc = load_added(t, path, added, err);
    for (size_t k = 0; rc == LLM4D_OK && t->eos < 0 && k < sizeof eos_names / sizeof *eos_names; k++) {
        for (int i = 0; i < t->n_added && t->eos < 0; i++)
            if (!strcmp(t->added[i].content, eos_names[k])) t->eos = t->added[i].id;
        if (t->eos < 0) t->eos = llm4d_tok_map_find(slot, cap - 1, t, eos_names[k], strlen(eos_names[k]));
    }
    if (rc == LLM4D_OK && flag(model, "ignore_merges", 0)) {
        t->piece_slot = slot;
        t->piece_mask = cap - 1;
        slot = NULL;
    }
    free(slot);
    free(keys);
    free(in_vocab);
    cJSON_Delete(root);
    return rc;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* encode */

/* Pre-tokenize s[0..n) from regex `level` on (each match and each gap is a piece for the next level), adding
 * ByteLevel's prefix space at its level; the last level's pieces are BPE'd. */
static llm4d_code pretok(llm4d_tokenizer_worker *w, const char *s, size_t n, int level, int prefixed,
                         llm4d_ids *out, llm4d_err *err) {
    const llm4d_tokenizer *t = w->t;
    if (n == 0) return LLM4D_OK; /* tokenizers drops empty pieces */
    if (level == t->prefix_level && t->add_prefix_space && !prefixed && s[0] != ' ') {
        if (n + 1 > w->pbuf_cap) { /* one buffer is enough: levels below this one add no prefix */
            char *nb = realloc(w->pbuf, 2 * n + 2);
            if (!nb) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for a piece of %zu bytes", n);
            w->pbuf = nb;
            w->pbuf_cap = 2 * n + 2;
        }
        w->pbuf[0] = ' ';
        memcpy(w->pbuf + 1, s, n);
        return pretok(w, w->pbuf, n + 1, level, 1, out, err);
    }
    if (level == t->n_splits) return llm4d_tok_encode_piece(w, (const unsigned char *)s, n, out, err);
    size_t prev = 0;
    while (prev < n) {
        int rc = pcre2_match(t->split[level], (PCRE2_SPTR)s, n, prev, PCRE2_NO_UTF_CHECK, w->md_split[level], w->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return llm4d_fail(err, LLM4D_EINTERNAL, "tokenizer regex failed: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md_split[level]);
        size_t a = ov[0], b = ov[1];
        /* tokenizers would cut a piece at an empty match; no real pattern matches empty, so say so, don't guess */
        if (b == a)
            return llm4d_fail(err, LLM4D_EUSER, "the tokenizer.json's pre_tokenizer regex %d matches an empty string, "
                              "which llm4d does not implement", level + 1);
        LLM4D_TRY(pretok(w, s + prev, a - prev, level + 1, prefixed, out, err));
        LLM4D_TRY(pretok(w, s + a, b - a, level + 1, prefixed, out, err));
        prev = b;
    }
    return pretok(w, s + prev, n - prev, level + 1, prefixed, out, err);
}

/* Split out the added tokens of pass 0 (normalized false) then pass 1 (normalized true), leftmost longest. */
static llm4d_code split_added(llm4d_tokenizer_worker *w, const char *s, size_t n, int pass, llm4d_ids *out,
                              llm4d_err *err) {
    const llm4d_tokenizer *t = w->t;
    if (n == 0) return LLM4D_OK;
    if (pass == 2) return pretok(w, s, n, 0, 0, out, err);
    size_t prev = 0;
    for (size_t i = 0; i < n; i++) {
        if (!t->added_first[pass][(unsigned char)s[i]]) continue;
        int best = -1;
        size_t blen = 0;
        for (int k = 0; k < t->n_added; k++) {
            const llm4d_tok_added *a = &t->added[k];
            if (a->normalized == pass && a->len > blen && a->len <= n - i && !memcmp(a->content, s + i, a->len))
                best = k, blen = a->len;
        }
        if (best < 0) continue;
        LLM4D_TRY(split_added(w, s + prev, i - prev, pass + 1, out, err));
        LLM4D_TRY(llm4d_ids_reserve(out, 1, err));
        out->v[out->n++] = t->added[best].id;
        prev = i + blen;
        i = prev - 1;
    }
    return split_added(w, s + prev, n - prev, pass + 1, out, err);
}

llm4d_code llm4d_tok_json_encode(llm4d_tokenizer_worker *w, const char *text, size_t len, llm4d_ids *out,
                                 llm4d_err *err) {
    return split_added(w, text, len, 0, out, err);
}
