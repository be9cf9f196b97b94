/* fuzz_prepare.c — libFuzzer harness: `llm4d prepare-data` on arbitrary input, with the small vocabulary of
 * fuzz/vocab. Part 0 holds options as words (text: plain-text input instead of JSON lines; blank: documents
 * separated by blank lines; mmap: Megatron output instead of npz; eos: append <|endoftext|>; gz: name the input
 * *.gz, so the bytes go through zlib's reader; a number: the chunk size in bytes, small values cutting documents
 * across chunk boundaries), part 1 is the input file. Property: a user error, or an output that opens as a corpus
 * holding exactly the documents and tokens the run reported. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/corpus.h"
#include "data/prepare.h"
#include "util.h"

static int has_word(const fz_part *p, const char *w) {
    size_t n = strlen(w);
    for (size_t i = 0; i + n <= p->n; i++)
        if (memcmp(p->p + i, w, n) == 0) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_part parts[2];
    if (fz_split(data, size, parts, 2) < 2) return 0;
    const char *dir = fz_fresh_dir();
    const int text = has_word(&parts[0], "text"), gz = has_word(&parts[0], "gz");
    size_t chunk = 0;
    for (size_t i = 0; i < parts[0].n; i++)
        if (parts[0].p[i] >= '0' && parts[0].p[i] <= '9') chunk = (chunk * 10 + (parts[0].p[i] - '0')) % 100000;
    char in[1024], prefix[1024], vocab[1024];
    fz_write(text ? (gz ? "in.txt.gz" : "in.txt") : (gz ? "in.jsonl.gz" : "in.jsonl"), parts[1].p, parts[1].n, in,
             sizeof in);
    snprintf(prefix, sizeof prefix, "%s/out/corpus", dir);
    const char *inputs[1] = {in};
    llm4d_prep_opts o = {.inputs = inputs, .n_inputs = 1, .json_key = "text",
                         .split_on_blank_lines = has_word(&parts[0], "blank"), .output_prefix = prefix,
                         .format = has_word(&parts[0], "mmap") ? LLM4D_PREP_MMAP : LLM4D_PREP_NPZ,
                         .append_eos = has_word(&parts[0], "eos"), .workers = 1,
                         .vocab_dir = fz_src_path("fuzz/vocab", vocab, sizeof vocab), .chunk_bytes = chunk};
    llm4d_prep_stats st;
    llm4d_err err = {0};
    llm4d_code rc = llm4d_prepare(&o, &st, &err);
    if (rc != LLM4D_OK) {
        fz_refused("prepare", rc, &err);
        return 0;
    }
    llm4d_corpus c;
    if (llm4d_corpus_open(&c, st.outputs[0], &err) != LLM4D_OK) fz_fail("prepare's output does not open: %s", err.msg);
    if (c.n_docs != st.n_docs || c.n_tokens != st.n_tokens)
        fz_fail("prepare reported %lld docs / %lld tokens, the corpus holds %lld / %lld", (long long)st.n_docs,
                (long long)st.n_tokens, (long long)c.n_docs, (long long)c.n_tokens);
    llm4d_corpus_close(&c);
    return 0;
}
