/* test_tokenizer_unit.c — unit checks of the tokenizer's parts that the end-to-end comparison with the JavaScript
 * encoder (test_tokenizer.sh) cannot isolate: the UTF-8 validator on malformed input, Python's strip, the heap BPE
 * against the reference quadratic loop on random byte strings (so the long-piece path is right even where the
 * corpus has few long pieces), the piece cache (a second encode of the same text gives the same ids), and a few
 * ids known from GPT-2. The vocabulary comes from $LLM4D_VOCAB_DIR or $BUILD_DIR/gpt2 (fetched if missing). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/tokenizer.h"


static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { /* splitmix64: deterministic test data */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

static int ids_equal(const llm4d_ids *a, const int32_t *b, size_t n) {
    return a->n == n && !memcmp(a->v, b, n * sizeof *b);
}

int main(void) {
    /* UTF-8 validation */
    struct {
        const char *s;
        size_t n, valid;
    } u[] = {
        {"plain ascii", 11, 11},
        {"caf\xc3\xa9", 5, 5},
        {"\xe2\x82\xac\xf0\x9f\x98\x80", 7, 7},
        {"ab\xff", 3, 2},
        {"\xc0\xaf", 2, 0},             /* overlong '/' */
        {"\xe0\x80\xaf", 3, 0},         /* overlong */
        {"x\xed\xa0\x80", 4, 1},        /* surrogate U+D800 */
        {"\xf4\x90\x80\x80", 4, 0},     /* above U+10FFFF */
        {"abcdefgh\xc3", 9, 8},         /* truncated after the 8-byte fast path */
        {"\xe2\x82", 2, 0},             /* truncated */
        {"\xc3\x28", 2, 0},             /* bad continuation */
    };
    int utf_ok = 1;
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        size_t got = llm4d_utf8_valid(u[i].s, u[i].n);
        if (got != u[i].valid) {
            printf("  utf8 case %zu: got %zu want %zu\n", i, got, u[i].valid);
            utf_ok = 0;
        }
    }
    check(utf_ok, "UTF-8 validator: overlong, surrogate, >U+10FFFF, truncated, bad continuation rejected");

    /* Python str.strip */
    struct {
        const char *s, *want;
    } st[] = {{"  a b  ", "a b"},
              {"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1fx\x1f", "x"},
              {"\xc2\x85\xc2\xa0z\xe3\x80\x80", "z"},            /* U+0085, U+00A0, U+3000 */
              {"\xef\xbb\xbfz\xef\xbb\xbf", "\xef\xbb\xbfz\xef\xbb\xbf"}, /* U+FEFF is not whitespace */
              {"   ", ""},
              {"", ""}};
    int strip_ok = 1;
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        size_t b, e;
        llm4d_py_strip(st[i].s, strlen(st[i].s), &b, &e);
        if (e - b != strlen(st[i].want) || memcmp(st[i].s + b, st[i].want, e - b)) {
            printf("  strip case %zu wrong\n", i);
            strip_ok = 0;
        }
    }
    check(strip_ok, "py_strip matches Python's str.strip (incl. U+001C..1F, U+0085; not U+FEFF)");

    char dir[4096];
    const char *env = getenv("LLM4D_VOCAB_DIR"), *build = getenv("BUILD_DIR");
    if (env && *env) snprintf(dir, sizeof dir, "%s", env);
    else snprintf(dir, sizeof dir, "%s/gpt2", build && *build ? build : "build");
    llm4d_tokenizer *t = NULL;
    llm4d_err err = {0};
    if (llm4d_tokenizer_load(&t, dir, &err) != LLM4D_OK) {
        char cmd[8300];
        snprintf(cmd, sizeof cmd, "tools/fetch_gpt2_vocab.sh '%s' >/dev/null", dir);
        if (system(cmd) != 0 || llm4d_tokenizer_load(&t, dir, &err) != LLM4D_OK) {
            check(0, "cannot load the vocabulary from %s: %s", dir, err.msg);
            return check_summary();
        }
    }
    check(llm4d_tokenizer_vocab_size(t) == 50257 && llm4d_tokenizer_eos(t) == 50256,
          "vocabulary: 50257 tokens, <|endoftext|> = 50256");

    llm4d_tokenizer_worker *w = llm4d_tokenizer_worker_new(t);
    llm4d_ids ids = {0};
    const int32_t hello[] = {15496, 11, 995};
    llm4d_tokenizer_encode(w, "Hello, world", 12, &ids, &err);
    check(ids_equal(&ids, hello, 3), "encode(\"Hello, world\") = 15496 11 995");
    ids.n = 0;
    const int32_t eot[] = {27, 91, 437, 1659, 5239, 91, 29};
    llm4d_tokenizer_encode(w, "<|endoftext|>", 13, &ids, &err);
    check(ids_equal(&ids, eot, 7), "the literal text <|endoftext|> is ordinary text (27 91 437 1659 5239 91 29)");

    /* heap BPE == reference BPE on random pieces drawn from a small alphabet of frequent bytes (so merges happen) */
    const char alphabet[] = "etaoinshrdlu ETAO.,'\"-=_!?0123\xc3\xa9\xe2\x80";
    int agree = 1, n_cases = 0;
    llm4d_ids a = {0}, b = {0};
    unsigned char buf[600];
    for (int c = 0; c < 3000 && agree; c++) {
        size_t n = 2 + rnd() % (c < 2000 ? 60 : 590);
        int mode = c % 3; /* 0: random over the alphabet, 1: repeated short unit, 2: one byte repeated */
        size_t unit = 1 + rnd() % 4;
        for (size_t i = 0; i < n; i++) {
            size_t k = mode == 0 ? rnd() : mode == 1 ? (i % unit) * 7 + (size_t)c : (size_t)c;
            buf[i] = (unsigned char)alphabet[k % (sizeof alphabet - 1)];
        }
        a.n = b.n = 0;
        llm4d_tokenizer_bpe_reference(t, buf, n, &a, &err);
        llm4d_tokenizer_bpe_heap(t, buf, n, &b, &err);
        if (a.n != b.n || memcmp(a.v, b.v, a.n * sizeof(int32_t))) {
            printf("  case %d (n=%zu) differs: %zu vs %zu ids\n", c, n, a.n, b.n);
            agree = 0;
        }
        n_cases++;
    }
    char what[128];
    snprintf(what, sizeof what, "heap BPE equals the reference loop on %d random pieces (2..591 bytes)", n_cases);
    check(agree, "%s", what);

    /* cache: encoding a text twice (second time from the cache) and in one worker vs a fresh one gives equal ids */
    const char *text = "The quick brown fox's 12345 jumps over the lazy dog.\n\n  The quick brown fox jumps again!";
    llm4d_tokenizer_worker *w2 = llm4d_tokenizer_worker_new(t);
    a.n = b.n = ids.n = 0;
    llm4d_tokenizer_encode(w, text, strlen(text), &a, &err);
    llm4d_tokenizer_encode(w, text, strlen(text), &b, &err);
    llm4d_tokenizer_encode(w2, text, strlen(text), &ids, &err);
    check(a.n > 10 && a.n == b.n && b.n == ids.n && !memcmp(a.v, b.v, a.n * 4) && !memcmp(a.v, ids.v, a.n * 4),
          "cached and uncached encodes agree");

    /* a 1 MB whitespace run and a 1 MB word do not blow the regex stack or take quadratic time */
    size_t big = 1 << 20;
    char *s = malloc(big + 2);
    memset(s, ' ', big);
    s[big] = 'x';
    ids.n = 0;
    llm4d_code rc = llm4d_tokenizer_encode(w, s, big + 1, &ids, &err);
    check(rc == LLM4D_OK && ids.n > 0, "1 MB of spaces then a word encodes");
    memset(s, 'a', big);
    ids.n = 0;
    rc = llm4d_tokenizer_encode(w, s, big, &ids, &err);
    check(rc == LLM4D_OK && ids.n > 0 && ids.n < big / 2, "a 1 MB word encodes (heap BPE)");
    char *back = NULL;
    size_t bl = 0;
    rc = llm4d_tokenizer_decode(t, ids.v, ids.n, &back, &bl, &err);
    check(rc == LLM4D_OK && bl == big && !memcmp(back, s, big), "and decodes back");
    free(back);
    free(s);
    int32_t bad_id = 50257;
    check(llm4d_tokenizer_decode(t, &bad_id, 1, &back, &bl, &err) == LLM4D_EUSER, "decode of id 50257 is a user error");

    llm4d_ids_free(&a);
    llm4d_ids_free(&b);
    llm4d_ids_free(&ids);
    llm4d_tokenizer_worker_free(w);
    llm4d_tokenizer_worker_free(w2);
    llm4d_tokenizer_free(t);
    return check_summary();
}
