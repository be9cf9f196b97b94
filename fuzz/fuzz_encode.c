/* fuzz_encode.c — libFuzzer harness: the GPT-2 encoder on arbitrary text, with the small vocabulary of fuzz/vocab
 * (fuzz/make_vocab.py), loaded once. Property: tok_check.h's (decode(encode(x)) == x on the valid UTF-8 prefix,
 * reference and heap BPE agree, raw id decoding is safe, py_strip stays in range). */
#include "tok_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static llm4d_tokenizer *t; /* loaded once per process: the vocabulary does not change between inputs */
    if (!t) {
        char dir[1024];
        llm4d_err err = {0};
        if (llm4d_tokenizer_load(&t, fz_src_path("fuzz/vocab", dir, sizeof dir), &err) != LLM4D_OK)
            fz_fail("cannot load %s: %s", dir, err.msg);
    }
    tok_check(t, data, size);
    return 0;
}
