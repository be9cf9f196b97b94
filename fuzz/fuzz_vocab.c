/* fuzz_vocab.c — libFuzzer harness: the tokenizer's vocabulary files. Parts: encoder.json, vocab.bpe, and a text.
 * Property: loading is a user error or gives a tokenizer for which tok_check.h's properties hold on the text. */
#include "tok_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_part parts[3];
    int n = fz_split(data, size, parts, 3);
    const char *dir = fz_fresh_dir();
    char path[1024];
    fz_write("v/encoder.json", parts[0].p, parts[0].n, path, sizeof path);
    if (n > 1) fz_write("v/vocab.bpe", parts[1].p, parts[1].n, path, sizeof path);
    char vdir[1024];
    snprintf(vdir, sizeof vdir, "%s/v", dir);
    llm4d_tokenizer *t;
    llm4d_err err = {0};
    llm4d_code rc = llm4d_tokenizer_load(&t, vdir, &err);
    if (rc == LLM4D_OK) {
        static const char text[] = "Hello, world! It's 2024: naïve café, 東京, \xF0\x9F\x98\x80 and  spaces\n\n";
        tok_check(t, n > 2 ? parts[2].p : (const uint8_t *)text, n > 2 ? parts[2].n : sizeof text - 1);
        llm4d_tokenizer_free(t);
    } else {
        fz_refused("tokenizer_load", rc, &err);
    }
    return 0;
}
