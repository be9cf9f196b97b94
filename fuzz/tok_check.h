/* tok_check.h — the tokenizer properties shared by fuzz_vocab.c and fuzz_encode.c (a header so that each harness
 * stays one file plus util.c):
 *   - encode then decode gives back the text (for the valid UTF-8 prefix of the input), whatever the vocabulary:
 *     every merged token's bytes are its two parts' bytes, which the loader checks;
 *   - the reference BPE (encoder.py's quadratic loop) and the heap BPE that long pieces use agree on any bytes;
 *   - decoding ids taken from the input either works or is a user error naming an id outside the vocabulary. */
#ifndef LLM4D_FUZZ_TOK_CHECK_H
#define LLM4D_FUZZ_TOK_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "util.h"

static void tok_check(const llm4d_tokenizer *t, const uint8_t *text, size_t size) {
    llm4d_err err = {0};
    size_t n = llm4d_utf8_valid((const char *)text, size);
    llm4d_tokenizer_worker *w = llm4d_tokenizer_worker_new(t);
    if (!w) fz_fail("worker_new");
    llm4d_ids ids = {0};
    if (llm4d_tokenizer_encode(w, (const char *)text, n, &ids, &err) != LLM4D_OK) fz_fail("encode: %s", err.msg);
    for (size_t i = 0; i < ids.n; i++)
        if (ids.v[i] < 0 || ids.v[i] >= llm4d_tokenizer_vocab_size(t)) fz_fail("encode produced id %d", ids.v[i]);
    char *back = NULL;
    size_t blen = 0;
    if (llm4d_tokenizer_decode(t, ids.v, ids.n, &back, &blen, &err) != LLM4D_OK) fz_fail("decode: %s", err.msg);
    if (blen != n || memcmp(back, text, n) != 0) fz_fail("decode(encode(text)) != text (%zu -> %zu bytes)", n, blen);
    free(back);
    /* encoding twice with the same worker (its piece cache warm) gives the same ids */
    llm4d_ids again = {0};
    if (llm4d_tokenizer_encode(w, (const char *)text, n, &again, &err) != LLM4D_OK || again.n != ids.n ||
        (ids.n && memcmp(again.v, ids.v, ids.n * sizeof *ids.v) != 0))
        fz_fail("a second encode with a warm cache differs");
    llm4d_ids_free(&again);
    llm4d_ids_free(&ids);
    llm4d_tokenizer_worker_free(w);

    size_t m = size < 512 ? size : 512; /* the reference is quadratic */
    llm4d_ids a = {0}, b = {0};
    if (llm4d_tokenizer_bpe_reference(t, text, m, &a, &err) != LLM4D_OK ||
        llm4d_tokenizer_bpe_heap(t, text, m, &b, &err) != LLM4D_OK)
        fz_fail("bpe: %s", err.msg);
    if (a.n != b.n || (a.n && memcmp(a.v, b.v, a.n * sizeof *a.v) != 0)) fz_fail("reference and heap BPE differ");
    llm4d_ids_free(&a);
    llm4d_ids_free(&b);

    size_t nid = size / 4 < 256 ? size / 4 : 256;
    int32_t raw[256];
    memcpy(raw, text, nid * 4);
    llm4d_code rc = llm4d_tokenizer_decode(t, raw, nid, &back, &blen, &err);
    if (rc == LLM4D_OK) free(back);
    else if (rc != LLM4D_EUSER) fz_fail("decode of raw ids returned %d", (int)rc);

    size_t b0, b1;
    llm4d_py_strip((const char *)text, n, &b0, &b1);
    if (b0 > b1 || b1 > n) fz_fail("py_strip range [%zu, %zu) of %zu", b0, b1, n);
}

#endif
