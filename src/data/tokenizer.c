/* tokenizer.c — GPT-2 byte-level BPE: vocabulary loading, the pre-tokenizer regex, BPE merges, encode, decode.
 *
 * The vocabulary files name tokens by strings over GPT-2's "byte-to-unicode" alphabet (each byte 0..255 stands
 * for one printable code point so that the merges file needs no escaping). We undo that mapping once at load time
 * and work on raw bytes and integer ids afterwards: a merge is a pair of ids -> (rank, merged id) in an
 * open-addressing table, and a piece starts as the ids of its bytes. Merging follows encoder.py exactly: take the
 * adjacent pair with the lowest rank and merge all its non-overlapping occurrences left to right, repeat. Short
 * pieces use that quadratic loop directly; long ones (runs of punctuation, long words) use a heap over a linked
 * list that processes one rank at a time in the same left-to-right order, so the result is identical and the
 * time stays O(n log n) however long the piece.
 *
 * The regex's \s is written out as the class JavaScript's \s matches (gpt-3-encoder, our outside oracle, runs the
 * pattern in JavaScript): PCRE2's own \s under UCP also matches U+0085 and U+180E and misses U+FEFF. Python's
 * regex module (OpenAI's encoder.py) differs from both on those three code points only.
 *
 * A Hugging Face tokenizer.json is read by tokenizer_json.c into the same struct (data/tokenizer_impl.h); this
 * file's merges, cache and decode serve both, and encode hands such a tokenizer to tokenizer_json.c's pre-tokenizer,
 * which comes back here for each piece. */
#include "data/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/tokenizer_impl.h"

/* JavaScript's \s: [\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]. */
#define WS \
    "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"
static const char gpt2_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS
                                   "]+(?![^" WS "])|[" WS "]+";

#define CACHE_MAX_PIECE 128        /* longer pieces are rare and not worth caching */
#define CACHE_SLOTS (1u << 16)     /* per worker; the cache is cleared when half full */
#define HEAP_THRESHOLD 32          /* pieces of more bytes than this use the heap merge */

#define PAIR_EMPTY LLM4D_TOK_PAIR_EMPTY
#define hash_bytes llm4d_tok_hash_bytes
#define utf8_decode llm4d_tok_utf8_decode
typedef llm4d_tok_cache_slot cache_slot;

/* ---------------------------------------------------------------------------------------------------------- */
/* small helpers */

void llm4d_ids_free(llm4d_ids *ids) {
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

llm4d_code llm4d_ids_reserve(llm4d_ids *ids, size_t more, llm4d_err *err) {
    if (ids->n + more <= ids->cap) return LLM4D_OK;
    size_t cap = ids->cap ? ids->cap : 256;
    while (cap < ids->n + more) cap *= 2;
    int32_t *v = realloc(ids->v, cap * sizeof *v);
    if (!v) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory growing a token buffer to %zu ids", cap);
    ids->v = v;
    ids->cap = cap;
    return LLM4D_OK;
}

static inline uint64_t hash_pair(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ull;
    return key ^ (key >> 31);
}

size_t llm4d_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        /* fast path over ASCII, 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t min;
        if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
        else return i;
        if (i + len > n) return i;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        uint32_t cp;
        utf8_decode(s + i, &cp);
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += len;
    }
    return n;
}

/* Python's str.isspace (Py_UNICODE_ISSPACE): bidirectional class WS, B or S, or category Zs. */
static int py_isspace(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

void llm4d_py_strip(const char *str, size_t n, size_t *begin, size_t *end) {
    const unsigned char *s = (const unsigned char *)str;
    size_t b = 0, e = n;
    while (b < e) {
        uint32_t cp;
        size_t l = utf8_decode(s + b, &cp);
        if (!py_isspace(cp)) break;
        b += l;
    }
    while (e > b) {
        size_t k = e - 1;
        while (k > b && (s[k] & 0xC0) == 0x80) k--;
        uint32_t cp;
        utf8_decode(s + k, &cp);
        if (!py_isspace(cp)) break;
        e = k;
    }
    *begin = b;
    *end = e;
}

const char *llm4d_tokenizer_default_dir(const char *flag, char *buf, size_t bufsize) {
    const char *env;
    if (flag && *flag) snprintf(buf, bufsize, "%s", flag);
    else if ((env = getenv("LLM4D_VOCAB_DIR")) && *env) snprintf(buf, bufsize, "%s", env);
    else if ((env = getenv("LLM4D_HOME")) && *env) snprintf(buf, bufsize, "%s/gpt2", env);
    else {
        const char *home = getenv("HOME");
        snprintf(buf, bufsize, "%s/.cache/llm4d/gpt2", home && *home ? home : ".");
    }
    return buf;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* loading */

#define FETCH_HINT "run tools/fetch_gpt2_vocab.sh to install them, or point --vocab_dir / LLM4D_VOCAB_DIR at a " \
                   "directory holding encoder.json and vocab.bpe (or at a Hugging Face tokenizer.json)"

llm4d_code llm4d_tok_read_file(const char *path, const char *what, const char *hint, char **data, size_t *len,
                               llm4d_err *err) {
    /* a pipe or a device would be read until memory runs out (or, a pipe, wait forever): only files */
    struct stat st;
    const int known = stat(path, &st) == 0; /* when it fails, fopen below reports why */
    if (known && !S_ISREG(st.st_mode))
        return llm4d_fail(err, LLM4D_EUSER, "%s %s is %s, not a file: %s", what, path,
                          S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a named pipe" : "a device",
                          hint);
    if (known && st.st_size > (off_t)1 << 30) /* GPT-2's are about 1 MB, Llama 3's tokenizer.json 9 MB */
        return llm4d_fail(err, LLM4D_EUSER, "%s %s is %lld bytes, not a vocabulary: %s", what, path,
                          (long long)st.st_size, hint);
    FILE *f = fopen(path, "rb");
    if (!f) return llm4d_fail(err, LLM4D_EUSER, "cannot open %s %s (%s): %s", what, path, strerror(errno), hint);
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading %s", path);
    }
    for (;;) {
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading %s", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return llm4d_fail(err, LLM4D_EIO, "error reading %s", path);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return LLM4D_OK;
}

void llm4d_tok_byte_alphabet(int cp_to_byte[324]) {
    for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp_to_byte[printable ? b : 256 + n++] = b;
    }
}

long llm4d_tok_token_to_bytes(const char *s, size_t len, const int cp_to_byte[324], unsigned char *out) {
    if (llm4d_utf8_valid(s, len) != len) return -1;
    size_t i = 0;
    long n = 0;
    while (i < len) {
        uint32_t cp;
        i += utf8_decode((const unsigned char *)s + i, &cp);
        if (cp >= 324 || cp_to_byte[cp] < 0) return -1;
        out[n++] = (unsigned char)cp_to_byte[cp];
    }
    return n;
}

int32_t llm4d_tok_map_find(const int32_t *slot, uint64_t mask, const llm4d_tokenizer *t, const void *b, size_t n) {
    for (uint64_t h = hash_bytes(b, n) & mask;; h = (h + 1) & mask) {
        int32_t id = slot[h];
        if (id < 0) return -1;
        if (t->tok_off[id + 1] - t->tok_off[id] == n && !memcmp(t->tok_blob + t->tok_off[id], b, n)) return id;
    }
}

/* bytes -> id table used only while loading the merges */
typedef struct {
    int32_t *slot; /* token id or -1 */
    uint64_t mask;
} bytes_map;

static int32_t bytes_map_find(const bytes_map *m, const llm4d_tokenizer *t, const void *b, size_t n) {
    return llm4d_tok_map_find(m->slot, m->mask, t, b, n);
}

void llm4d_tok_pair_insert(llm4d_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t h = hash_pair(key) & t->pair_mask;; h = (h + 1) & t->pair_mask) {
        if (t->pair_key[h] == PAIR_EMPTY || t->pair_key[h] == key) {
            /* a pair listed twice keeps its later rank, as dict(zip(merges, range(n))) does */
            t->pair_key[h] = key;
            t->pair_rank[h] = rank;
            t->pair_merged[h] = merged;
            return;
        }
    }
}

/* rank of (a, b), or -1 when they do not merge; *merged receives the merged id */
static inline int32_t pair_rank(const llm4d_tokenizer *t, int32_t a, int32_t b, int32_t *merged) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t h = hash_pair(key) & t->pair_mask;; h = (h + 1) & t->pair_mask) {
        uint64_t k = t->pair_key[h];
        if (k == key) {
            *merged = t->pair_merged[h];
            return t->pair_rank[h];
        }
        if (k == PAIR_EMPTY) return -1;
    }
}

static llm4d_code load_encoder(llm4d_tokenizer *t, const char *path, const int cp_to_byte[324], llm4d_err *err) {
    char *text;
    size_t len;
    LLM4D_TRY(llm4d_tok_read_file(path, "GPT-2 vocabulary file", FETCH_HINT, &text, &len, err));
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return llm4d_fail(err, LLM4D_EUSER, "%s is not a JSON object (corrupt or truncated): " FETCH_HINT, path);
    }
    int n = cJSON_GetArraySize(root);
    size_t blob = 0;
    for (cJSON *it = root->child; it; it = it->next) blob += strlen(it->string);
    llm4d_code rc = LLM4D_OK;
    t->vocab_size = n;
    t->tok_off = calloc((size_t)n + 1, sizeof *t->tok_off);
    const char **keys = calloc((size_t)n, sizeof *keys);
    t->tok_blob = malloc(blob + 1);
    if (!t->tok_off || !keys || !t->tok_blob) {
        rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory loading %s", path);
        goto done;
    }
    if (n < 257) {
        rc = llm4d_fail(err, LLM4D_EUSER, "%s holds %d tokens, fewer than the 256 bytes + 1: " FETCH_HINT, path, n);
        goto done;
    }
    /* ids must be exactly 0..n-1: place each key by its id, then lay the bytes out in id order */
    for (cJSON *it = root->child; it; it = it->next) {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
        /* range first: converting a double outside int's range (or NaN) to int is undefined behaviour */
        int id = v >= 0 && v < n ? (int)v : -1;
        if (id < 0 || (double)id != v || keys[id]) {
            rc = llm4d_fail(err, LLM4D_EUSER,
                            "%s: token \"%.40s\" has a bad or repeated id (corrupt file): " FETCH_HINT, path,
                            it->string);
            goto done;
        }
        keys[id] = it->string;
    }
    size_t off = 0;
    t->eos = -1;
    for (int id = 0; id < n; id++) {
        size_t kl = strlen(keys[id]);
        long nb = llm4d_tok_token_to_bytes(keys[id], kl, cp_to_byte, (unsigned char *)t->tok_blob + off);
        if (nb <= 0) {
            rc = llm4d_fail(err, LLM4D_EUSER, "%s: token \"%.40s\" is not in GPT-2's byte alphabet (corrupt file): "
                            FETCH_HINT, path, keys[id]);
            goto done;
        }
        if (!strcmp(keys[id], "<|endoftext|>")) t->eos = id;
        t->tok_off[id] = (uint32_t)off;
        off += (size_t)nb;
    }
    t->tok_off[n] = (uint32_t)off;
    if (t->eos < 0) rc = llm4d_fail(err, LLM4D_EUSER, "%s has no <|endoftext|> token: " FETCH_HINT, path);
done:
    free(keys);
    cJSON_Delete(root);
    return rc;
}

static llm4d_code load_merges(llm4d_tokenizer *t, const char *path, const int cp_to_byte[324], llm4d_err *err) {
    char *text;
    size_t len;
    LLM4D_TRY(llm4d_tok_read_file(path, "GPT-2 vocabulary file", FETCH_HINT, &text, &len, err));
    llm4d_code rc = LLM4D_OK;
    bytes_map map = {0};
    uint64_t cap = 1;
    while (cap < 2 * (uint64_t)t->vocab_size) cap <<= 1;
    map.mask = cap - 1;
    map.slot = malloc(cap * sizeof *map.slot);
    size_t n_lines = 1;
    for (size_t i = 0; i < len; i++) n_lines += text[i] == '\n';
    uint64_t pcap = 1;
    while (pcap < 2 * (uint64_t)n_lines) pcap <<= 1;
    t->pair_mask = pcap - 1;
    t->pair_key = malloc(pcap * sizeof *t->pair_key);
    t->pair_rank = malloc(pcap * sizeof *t->pair_rank);
    t->pair_merged = malloc(pcap * sizeof *t->pair_merged);
    if (!map.slot || !t->pair_key || !t->pair_rank || !t->pair_merged) {
        rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory loading %s", path);
        goto done;
    }
    memset(map.slot, 0xff, cap * sizeof *map.slot);
    for (uint64_t i = 0; i < pcap; i++) t->pair_key[i] = PAIR_EMPTY;
    for (int32_t id = 0; id < t->vocab_size; id++) {
        const char *b = t->tok_blob + t->tok_off[id];
        size_t bl = t->tok_off[id + 1] - t->tok_off[id];
        if (id != t->eos && bytes_map_find(&map, t, b, bl) >= 0) {
            rc = llm4d_fail(err, LLM4D_EUSER, "encoder.json lists the same token twice (corrupt file): " FETCH_HINT);
            goto done;
        }
        uint64_t h = hash_bytes(b, bl) & map.mask;
        while (map.slot[h] >= 0) h = (h + 1) & map.mask;
        map.slot[h] = id;
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_id[b] = bytes_map_find(&map, t, &c, 1);
        if (t->byte_id[b] < 0) {
            rc = llm4d_fail(err, LLM4D_EUSER, "encoder.json lacks the token of byte %d (corrupt file): " FETCH_HINT, b);
            goto done;
        }
    }
    /* encoder.py: merges = bpe_data.split("\n")[1:-1]; the first line is the "#version" header */
    char *p = text, *end = text + len;
    char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl || strncmp(p, "#version", 8)) {
        rc = llm4d_fail(err, LLM4D_EUSER, "%s does not start with a #version line (not a GPT-2 merges file): "
                        FETCH_HINT, path);
        goto done;
    }
    p = nl + 1;
    int32_t rank = 0;
    long line = 1;
    unsigned char buf_a[1024], buf_b[1024], buf_ab[2048];
    while (p < end) {
        line++;
        nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        if (le > p && le[-1] == '\r') le--;
        if (le == p && !nl) break; /* the file's final newline */
        char *sp = memchr(p, ' ', (size_t)(le - p));
        long la = -1, lb = -1;
        if (sp && sp > p && sp + 1 < le && !memchr(sp + 1, ' ', (size_t)(le - sp - 1)) && sp - p < 1000 &&
            le - sp < 1000) {
            la = llm4d_tok_token_to_bytes(p, (size_t)(sp - p), cp_to_byte, buf_a);
            lb = llm4d_tok_token_to_bytes(sp + 1, (size_t)(le - sp - 1), cp_to_byte, buf_b);
        }
        if (la <= 0 || lb <= 0) {
            rc = llm4d_fail(err, LLM4D_EUSER, "%s line %ld is not two tokens separated by a space (corrupt file): "
                            FETCH_HINT, path, line);
            goto done;
        }
        memcpy(buf_ab, buf_a, (size_t)la);
        memcpy(buf_ab + la, buf_b, (size_t)lb);
        int32_t ia = bytes_map_find(&map, t, buf_a, (size_t)la), ib = bytes_map_find(&map, t, buf_b, (size_t)lb);
        int32_t im = bytes_map_find(&map, t, buf_ab, (size_t)(la + lb));
        if (ia < 0 || ib < 0 || im < 0) {
            rc = llm4d_fail(err, LLM4D_EUSER, "%s line %ld merges tokens missing from encoder.json (files from "
                            "different vocabularies?): " FETCH_HINT, path, line);
            goto done;
        }
        llm4d_tok_pair_insert(t, ia, ib, rank++, im);
        if (!nl) break;
        p = nl + 1;
    }
    if (rank == 0) rc = llm4d_fail(err, LLM4D_EUSER, "%s holds no merges (truncated file): " FETCH_HINT, path);
done:
    free(map.slot);
    free(text);
    return rc;
}

/* Which tokenizer.json dir names, if any: dir itself when it is a file, else DIR/tokenizer.json when DIR holds no
 * encoder.json (a directory with both keeps GPT-2's files, as before tokenizer.json was read). */
static int tokenizer_json_path(const char *dir, char *path, size_t n) {
    struct stat st;
    const size_t l = strlen(dir);
    const int exists = stat(dir, &st) == 0;
    /* a missing *.json is a missing tokenizer.json (not a GPT-2 directory without encoder.json) */
    if ((exists && !S_ISDIR(st.st_mode)) || (!exists && l >= 5 && !strcmp(dir + l - 5, ".json"))) {
        snprintf(path, n, "%s", dir);
        return 1;
    }
    snprintf(path, n, "%s/encoder.json", dir);
    if (stat(path, &st) == 0) return 0;
    snprintf(path, n, "%s/tokenizer.json", dir);
    return stat(path, &st) == 0;
}

llm4d_code llm4d_tokenizer_load(llm4d_tokenizer **out, const char *dir, llm4d_err *err) {
    *out = NULL;
    llm4d_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory loading the tokenizer");
    int cp_to_byte[324];
    llm4d_tok_byte_alphabet(cp_to_byte);
    char path[4096];
    llm4d_code rc;
    if (tokenizer_json_path(dir, path, sizeof path)) {
        rc = llm4d_tok_json_load(t, path, err);
        if (rc != LLM4D_OK) llm4d_tokenizer_free(t);
        else *out = t;
        return rc;
    }
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    rc = load_encoder(t, path, cp_to_byte, err);
    if (rc == LLM4D_OK) {
        snprintf(path, sizeof path, "%s/vocab.bpe", dir);
        rc = load_merges(t, path, cp_to_byte, err);
    }
    if (rc == LLM4D_OK) {
        int ecode;
        PCRE2_SIZE eoff;
        t->re = pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ecode, &eoff,
                              NULL);
        LLM4D_ASSERT(t->re, "GPT-2 regex failed to compile: error %d at offset %zu", ecode, (size_t)eoff);
        /* JIT is an optimisation: without it (an unsupported CPU) pcre2_match interprets the pattern */
        (void)pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE);
    }
    if (rc != LLM4D_OK) {
        llm4d_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return LLM4D_OK;
}

void llm4d_tokenizer_free(llm4d_tokenizer *t) {
    if (!t) return;
    pcre2_code_free(t->re);
    for (int i = 0; i < t->n_splits; i++) pcre2_code_free(t->split[i]);
    free(t->hole);
    free(t->piece_slot);
    free(t->added);
    free(t->added_blob);
    free(t->tok_blob);
    free(t->tok_off);
    free(t->pair_key);
    free(t->pair_rank);
    free(t->pair_merged);
    free(t);
}

int32_t llm4d_tokenizer_vocab_size(const llm4d_tokenizer *t) { return t->vocab_size; }
int32_t llm4d_tokenizer_eos(const llm4d_tokenizer *t) { return t->eos; }

/* ---------------------------------------------------------------------------------------------------------- */
/* BPE on one piece */

llm4d_code llm4d_tokenizer_bpe_reference(const llm4d_tokenizer *t, const unsigned char *bytes, size_t n,
                                         llm4d_ids *out, llm4d_err *err) {
    if (n == 0) return LLM4D_OK; /* an empty piece has no ids (and out->v may still be NULL: no offset into it) */
    LLM4D_TRY(llm4d_ids_reserve(out, n, err));
    int32_t *w = out->v + out->n;
    for (size_t i = 0; i < n; i++) w[i] = t->byte_id[bytes[i]];
    size_t m = n;
    while (m > 1) {
        int32_t best = INT32_MAX, a = -1, b = -1, merged = -1;
        for (size_t i = 0; i + 1 < m; i++) {
            int32_t mg, r = pair_rank(t, w[i], w[i + 1], &mg);
            if (r >= 0 && r < best) best = r, a = w[i], b = w[i + 1], merged = mg;
        }
        if (best == INT32_MAX) break;
        size_t j = 0;
        for (size_t i = 0; i < m;) {
            if (i + 1 < m && w[i] == a && w[i + 1] == b) {
                w[j++] = merged;
                i += 2;
            } else {
                w[j++] = w[i++];
            }
        }
        m = j;
    }
    out->n += m;
    return LLM4D_OK;
}

typedef struct {
    int32_t rank, pos, a, b, merged;
} heap_entry;

static inline int heap_less(const heap_entry *x, const heap_entry *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void heap_push(heap_entry *h, size_t *n, heap_entry e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static heap_entry heap_pop(heap_entry *h, size_t *n) {
    heap_entry top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

/* Symbols live in a doubly linked list over positions 0..n-1 (a merge keeps the left position and unlinks the
 * right), so positions keep their left-to-right order. All heap entries of the lowest rank are one pair (a, b);
 * popping them in position order and pushing the pairs the merges create only after the whole rank is done is
 * exactly encoder.py's "merge every occurrence of the best pair, left to right, then look again". */
llm4d_code llm4d_tokenizer_bpe_heap(const llm4d_tokenizer *t, const unsigned char *bytes, size_t n, llm4d_ids *out,
                                    llm4d_err *err) {
    if (n == 0) return LLM4D_OK;
    LLM4D_TRY(llm4d_ids_reserve(out, n, err));
    int32_t *sym = malloc(n * sizeof *sym), *prev = malloc(n * sizeof *prev), *next = malloc(n * sizeof *next);
    int32_t *touched = malloc(n * sizeof *touched);
    heap_entry *heap = malloc(2 * n * sizeof *heap); /* live entries never exceed the pushes: n-1 + 2 per merge */
    size_t heap_cap = 2 * n, hn = 0;
    llm4d_code rc = LLM4D_OK;
    if (!sym || !prev || !next || !touched || !heap) {
        rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory merging a piece of %zu bytes", n);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        sym[i] = t->byte_id[bytes[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t mg, r = pair_rank(t, sym[i], sym[i + 1], &mg);
        if (r >= 0) heap_push(heap, &hn, (heap_entry){r, (int32_t)i, sym[i], sym[i + 1], mg});
    }
    while (hn > 0) {
        int32_t rank = heap[0].rank;
        size_t nt = 0;
        while (hn > 0 && heap[0].rank == rank) {
            heap_entry e = heap_pop(heap, &hn);
            int32_t p = e.pos, q = next[p];
            /* stale entries: the left symbol was absorbed (prev/next of a dead node are -2) or a side changed */
            if (prev[p] == -2 || q < 0 || sym[p] != e.a || sym[q] != e.b) continue;
            sym[p] = e.merged;
            next[p] = next[q];
            if (next[q] >= 0) prev[next[q]] = p;
            prev[q] = next[q] = -2;
            touched[nt++] = p;
        }
        for (size_t k = 0; k < nt; k++) {
            int32_t p = touched[k], mg, r;
            if (hn + 2 > heap_cap) {
                heap_entry *nh = realloc(heap, 2 * heap_cap * sizeof *heap);
                if (!nh) {
                    rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory merging a piece of %zu bytes", n);
                    goto done;
                }
                heap = nh;
                heap_cap *= 2;
            }
            if (prev[p] >= 0 && (r = pair_rank(t, sym[prev[p]], sym[p], &mg)) >= 0)
                heap_push(heap, &hn, (heap_entry){r, prev[p], sym[prev[p]], sym[p], mg});
            if (next[p] >= 0 && (r = pair_rank(t, sym[p], sym[next[p]], &mg)) >= 0)
                heap_push(heap, &hn, (heap_entry){r, p, sym[p], sym[next[p]], mg});
        }
    }
    for (int32_t p = 0; p >= 0; p = next[p]) out->v[out->n++] = sym[p];
done:
    free(sym);
    free(prev);
    free(next);
    free(touched);
    free(heap);
    return rc;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* workers: regex + cache */

llm4d_tokenizer_worker *llm4d_tokenizer_worker_new(const llm4d_tokenizer *t) {
    llm4d_tokenizer_worker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->t = t;
    w->md = t->re ? pcre2_match_data_create_from_pattern(t->re, NULL) : NULL;
    int ok = !t->re || w->md;
    for (int i = 0; i < t->n_splits; i++)
        ok &= !!(w->md_split[i] = pcre2_match_data_create_from_pattern(t->split[i], NULL));
    w->mctx = pcre2_match_context_create(NULL);
    /* a long whitespace run backtracks through `\s+(?!\S)`; give the JIT room for it */
    w->jit_stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, NULL);
    w->slots = calloc(CACHE_SLOTS, sizeof *w->slots);
    if (!ok || !w->mctx || !w->jit_stack || !w->slots) {
        llm4d_tokenizer_worker_free(w);
        return NULL;
    }
    pcre2_jit_stack_assign(w->mctx, NULL, w->jit_stack);
    return w;
}

void llm4d_tokenizer_worker_free(llm4d_tokenizer_worker *w) {
    if (!w) return;
    pcre2_match_data_free(w->md);
    for (int i = 0; i < LLM4D_TOK_MAX_SPLITS; i++) pcre2_match_data_free(w->md_split[i]);
    free(w->pbuf);
    pcre2_match_context_free(w->mctx);
    pcre2_jit_stack_free(w->jit_stack);
    free(w->slots);
    free(w->keys);
    llm4d_ids_free(&w->cached_ids);
    llm4d_ids_free(&w->scratch);
    free(w);
}

static void cache_clear(llm4d_tokenizer_worker *w) {
    memset(w->slots, 0, CACHE_SLOTS * sizeof *w->slots);
    w->n_cached = 0;
    w->keys_n = 0;
    w->cached_ids.n = 0;
}

llm4d_code llm4d_tok_encode_piece(llm4d_tokenizer_worker *w, const unsigned char *p, size_t n, llm4d_ids *out,
                               llm4d_err *err) {
    const llm4d_tokenizer *t = w->t;
    if (t->piece_slot) { /* a tokenizer.json's ignore_merges: a piece that is a token is that token */
        int32_t id = llm4d_tok_map_find(t->piece_slot, t->piece_mask, t, p, n);
        if (id >= 0) {
            LLM4D_TRY(llm4d_ids_reserve(out, 1, err));
            out->v[out->n++] = id;
            return LLM4D_OK;
        }
    }
    if (n == 1) {
        LLM4D_TRY(llm4d_ids_reserve(out, 1, err));
        out->v[out->n++] = t->byte_id[p[0]];
        return LLM4D_OK;
    }
    if (n > CACHE_MAX_PIECE)
        return n > HEAP_THRESHOLD ? llm4d_tokenizer_bpe_heap(t, p, n, out, err)
                                  : llm4d_tokenizer_bpe_reference(t, p, n, out, err);
    uint64_t h = hash_bytes(p, n);
    uint32_t i = (uint32_t)h & (CACHE_SLOTS - 1);
    for (;; i = (i + 1) & (CACHE_SLOTS - 1)) {
        cache_slot *s = &w->slots[i];
        if (s->key_len == 0) break;
        if (s->hash == h && s->key_len == n && !memcmp(w->keys + s->key_off, p, n)) {
            LLM4D_TRY(llm4d_ids_reserve(out, s->n_ids, err));
            memcpy(out->v + out->n, w->cached_ids.v + s->ids_off, s->n_ids * sizeof(int32_t));
            out->n += s->n_ids;
            return LLM4D_OK;
        }
    }
    w->scratch.n = 0;
    LLM4D_TRY(n > HEAP_THRESHOLD ? llm4d_tokenizer_bpe_heap(t, p, n, &w->scratch, err)
                                 : llm4d_tokenizer_bpe_reference(t, p, n, &w->scratch, err));
    LLM4D_TRY(llm4d_ids_reserve(out, w->scratch.n, err));
    memcpy(out->v + out->n, w->scratch.v, w->scratch.n * sizeof(int32_t));
    out->n += w->scratch.n;
    /* remember it; a full cache starts over (the common words come back within a few documents) */
    if (w->n_cached >= CACHE_SLOTS / 2) {
        cache_clear(w);
        i = (uint32_t)h & (CACHE_SLOTS - 1);
    }
    if (w->keys_n + n > w->keys_cap) {
        size_t cap = w->keys_cap ? 2 * w->keys_cap : 1 << 20;
        char *nk = realloc(w->keys, cap);
        if (!nk) return LLM4D_OK; /* caching is optional */
        w->keys = nk;
        w->keys_cap = cap;
    }
    llm4d_err ignore;
    if (llm4d_ids_reserve(&w->cached_ids, w->scratch.n, &ignore) != LLM4D_OK) return LLM4D_OK;
    memcpy(w->keys + w->keys_n, p, n);
    memcpy(w->cached_ids.v + w->cached_ids.n, w->scratch.v, w->scratch.n * sizeof(int32_t));
    w->slots[i] = (cache_slot){h, (uint32_t)w->keys_n, (uint32_t)n, (uint32_t)w->cached_ids.n,
                               (uint32_t)w->scratch.n};
    w->keys_n += n;
    w->cached_ids.n += w->scratch.n;
    w->n_cached++;
    return LLM4D_OK;
}

llm4d_code llm4d_tokenizer_encode(llm4d_tokenizer_worker *w, const char *text, size_t len, llm4d_ids *out,
                                  llm4d_err *err) {
    if (w->t->hf) return llm4d_tok_json_encode(w, text, len, out, err);
    PCRE2_SIZE start = 0;
    while (start < len) {
        int rc = pcre2_match(w->t->re, (PCRE2_SPTR)text, len, start, PCRE2_NO_UTF_CHECK, w->md, w->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return llm4d_fail(err, LLM4D_EINTERNAL, "tokenizer regex failed at byte %zu: %s", (size_t)start,
                              (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
        LLM4D_ASSERT(ov[1] > ov[0], "empty regex match at byte %zu", (size_t)ov[0]);
        LLM4D_TRY(llm4d_tok_encode_piece(w, (const unsigned char *)text + ov[0], ov[1] - ov[0], out, err));
        start = ov[1];
    }
    return LLM4D_OK;
}

llm4d_code llm4d_tokenizer_decode(const llm4d_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len,
                                  llm4d_err *err) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return llm4d_fail(err, LLM4D_EUSER, "token id %d is outside the vocabulary (0..%d)", ids[i],
                              t->vocab_size - 1);
        if (t->hole && t->hole[ids[i]])
            return llm4d_fail(err, LLM4D_EUSER, "token id %d is no token of the vocabulary (its ids have gaps)",
                              ids[i]);
        total += t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
    }
    char *s = malloc(total + 1);
    if (!s) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory decoding %zu ids", n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
        memcpy(s + k, t->tok_blob + t->tok_off[ids[i]], l);
        k += l;
    }
    s[k] = 0;
    *text = s;
    *len = k;
    return LLM4D_OK;
}
