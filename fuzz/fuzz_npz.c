/* fuzz_npz.c — libFuzzer harness: Paddle's token files. Part 0 is read as P_ids.npz (the old format: arrays ids
 * and lens in one archive); with a second part, parts 0 and 1 are also read as the new-format pair P_idx.npz
 * (lens) + P_ids.npy (ids, memory-mapped). Property: a user error, or a corpus whose documents cover its tokens
 * exactly and whose every token can be read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/corpus.h"
#include "data/npz.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_part parts[2];
    int n = fz_split(data, size, parts, 2);
    fz_fresh_dir();
    char p0[1024], p1[1024];
    llm4d_err err = {0};
    llm4d_corpus c;
    fz_write("old_ids.npz", parts[0].p, parts[0].n, p0, sizeof p0);
    llm4d_code rc = llm4d_corpus_open_npz(&c, p0, &err);
    if (rc == LLM4D_OK) {
        fz_walk_corpus(&c);
        llm4d_corpus_close(&c);
    } else {
        fz_refused("corpus_open_npz", rc, &err);
    }
    /* single members by name, as the sample-index cache is read */
    llm4d_array a;
    if (llm4d_npz_read(p0, "docs", &a, &err) == LLM4D_OK) llm4d_array_free(&a);
    if (n == 2) {
        fz_write("new_idx.npz", parts[0].p, parts[0].n, p0, sizeof p0);
        fz_write("new_ids.npy", parts[1].p, parts[1].n, p1, sizeof p1);
        rc = llm4d_corpus_open(&c, p1, &err);
        if (rc == LLM4D_OK) {
            fz_walk_corpus(&c);
            llm4d_corpus_close(&c);
        } else {
            fz_refused("corpus_open (pair)", rc, &err);
        }
    }
    return 0;
}
