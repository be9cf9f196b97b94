/* fuzz_megatron.c — libFuzzer harness: Megatron's indexed dataset, part 0 as P.idx and part 1 as P.bin, opened by
 * prefix (llm4d_corpus_open_megatron) and by directory (llm4d_corpus_open, which also lists it). Property: a user
 * error, or a corpus whose documents cover its tokens exactly and whose every token is readable (P.bin is mapped,
 * so a pointer past its end would be a read outside the mapping). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/corpus.h"
#include "data/megatron.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_part parts[2];
    int n = fz_split(data, size, parts, 2);
    const char *dir = fz_fresh_dir();
    char p[1024];
    fz_write("m/corpus.idx", parts[0].p, parts[0].n, p, sizeof p);
    fz_write("m/corpus.bin", n > 1 ? parts[1].p : data, n > 1 ? parts[1].n : 0, p, sizeof p);
    char prefix[1024];
    snprintf(prefix, sizeof prefix, "%s/m/corpus", dir);
    llm4d_err err = {0};
    llm4d_corpus c;
    llm4d_code rc = llm4d_corpus_open_megatron(&c, prefix, &err);
    if (rc == LLM4D_OK) {
        fz_walk_corpus(&c);
        llm4d_corpus_close(&c);
    } else {
        fz_refused("corpus_open_megatron", rc, &err);
    }
    snprintf(prefix, sizeof prefix, "%s/m", dir);
    llm4d_code rc2 = llm4d_corpus_open(&c, prefix, &err);
    if ((rc2 == LLM4D_OK) != (rc == LLM4D_OK)) fz_fail("opening by prefix and by directory disagree");
    if (rc2 == LLM4D_OK) llm4d_corpus_close(&c);
    return 0;
}
