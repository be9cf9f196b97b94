/* test_blend_unit.c — input_dir lists, directory discovery with Megatron pairs, and the blend of several corpora.
 *
 * Without arguments (ctest): self-contained checks on corpora written here (Paddle npz, the npy + idx.npz pair,
 * Megatron pairs) — Megatron's blending on hand-computed cases (ties go to the first corpus, draws stay within 1
 * of w * i; a corpus of weight 0 is left out of the blend); the list syntaxes (one path, a prefix, spaces, commas, weights, a
 * directory inside a list) with their normalised weights; the directory precedence (Paddle's new format over its
 * old one, Megatron pairs added, a Megatron twin of a Paddle corpus skipped); every bad list a user error; every
 * blended item equal to the item of its corpus's own GPT index, the identity blend equal to the plain index, a
 * corpus with an empty split left out; and a Megatron corpus of 32 MB read through the blend without loading it:
 * its ids point into a shared mapping of the .bin and the process's anonymous memory grows by far less than the
 * file while every sample is read.
 *
 * With arguments it is the driver of test_blend.sh (compared with a Python re-implementation of Megatron):
 *   --blend INPUT_DIR SIZE   open INPUT_DIR as training does; print "corpus PATH TOKENS WEIGHT" per corpus
 *                            (weight as %.17g), then SIZE lines "dataset sample" of Megatron's blending. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "data/blend.h"
#include "data/corpus.h"
#include "data/gpt_index.h"
#include "data/megatron.h"
#include "data/npz.h"



static int driver(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--blend")) {
        llm4d_corpora cs;
        llm4d_err err = {0};
        if (llm4d_corpora_open(&cs, argv[2], &err) != LLM4D_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 2;
        }
        const int64_t size = atoll(argv[3]);
        for (int d = 0; d < cs.n; d++)
            printf("corpus %s %lld %.17g\n", cs.corpus[d].path, (long long)cs.corpus[d].n_tokens, cs.weight[d]);
        uint16_t *ds = malloc((size_t)(size ? size : 1) * sizeof *ds);
        int64_t *sm = malloc((size_t)(size ? size : 1) * sizeof *sm), *counts = malloc((size_t)cs.n * sizeof *counts);
        llm4d_blend_indices(cs.weight, cs.n, size, ds, sm, counts);
        for (int64_t i = 0; i < size; i++) printf("%d %lld\n", ds[i], (long long)sm[i]);
        free(ds);
        free(sm);
        free(counts);
        llm4d_corpora_close(&cs);
        return 0;
    }
    fprintf(stderr, "usage: test_blend_unit [--blend INPUT_DIR SIZE]\n");
    return 2;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* corpora written for the checks: document d of a corpus holds len(d) ids derived from (seed, d, t) */

static int doc_len(int seed, int d) { return 5 + (d * 37 + seed * 11) % 60; }
static int32_t tok(int seed, int d, int t) { return 1 + (seed * 1009 + d * 131 + t * 7) % 5000; }

static int64_t fill(int seed, int docs, int32_t *lens, uint16_t *ids) {
    int64_t n = 0;
    for (int d = 0; d < docs; d++) {
        lens[d] = doc_len(seed, d);
        for (int t = 0; t < lens[d]; t++) ids[n++] = (uint16_t)tok(seed, d, t);
    }
    return n;
}

static int write_npz(const char *path, int seed, int docs) {
    int32_t *lens = malloc((size_t)docs * sizeof *lens);
    uint16_t *ids = malloc((size_t)docs * 70 * sizeof *ids);
    int64_t n = fill(seed, docs, lens, ids);
    llm4d_array a[2] = {{.name = "ids", .dtype = LLM4D_DT_U16, .ndim = 1, .shape = {n}, .data = ids,
                         .nbytes = (size_t)n * 2},
                        {.name = "lens", .dtype = LLM4D_DT_I32, .ndim = 1, .shape = {docs}, .data = lens,
                         .nbytes = (size_t)docs * 4}};
    llm4d_err err = {0};
    int ok = llm4d_npz_write(path, a, 2, 0, &err) == LLM4D_OK;
    free(lens);
    free(ids);
    return ok;
}

static int write_pair(const char *prefix, int seed, int docs) {
    int32_t *lens = malloc((size_t)docs * sizeof *lens);
    uint16_t *ids = malloc((size_t)docs * 70 * sizeof *ids);
    int64_t n = fill(seed, docs, lens, ids);
    char p[1300];
    llm4d_err err = {0};
    llm4d_array a = {.name = "ids", .dtype = LLM4D_DT_U16, .ndim = 1, .shape = {n}, .data = ids,
                     .nbytes = (size_t)n * 2};
    snprintf(p, sizeof p, "%s_ids.npy", prefix);
    int ok = llm4d_npy_write(p, &a, &err) == LLM4D_OK;
    llm4d_array l = {.name = "lens", .dtype = LLM4D_DT_I32, .ndim = 1, .shape = {docs}, .data = lens,
                     .nbytes = (size_t)docs * 4};
    snprintf(p, sizeof p, "%s_idx.npz", prefix);
    ok = ok && llm4d_npz_write(p, &l, 1, 0, &err) == LLM4D_OK;
    free(lens);
    free(ids);
    return ok;
}

static int write_mega(const char *prefix, int seed, int docs) {
    llm4d_megatron_writer w;
    llm4d_err err = {0};
    if (llm4d_megatron_writer_open(&w, prefix, LLM4D_DT_U16, &err) != LLM4D_OK) return 0;
    int32_t buf[70];
    for (int d = 0; d < docs; d++) {
        for (int t = 0; t < doc_len(seed, d); t++) buf[t] = tok(seed, d, t);
        if (llm4d_megatron_writer_add(&w, buf, doc_len(seed, d), &err) != LLM4D_OK) return 0;
    }
    return llm4d_megatron_writer_finish(&w, &err) == LLM4D_OK;
}

static int64_t tokens_of(int seed, int docs) {
    int64_t n = 0;
    for (int d = 0; d < docs; d++) n += doc_len(seed, d);
    return n;
}

/* ---------------------------------------------------------------------------------------------------------- */

static void check_indices(void) {
    uint16_t ds[8];
    int64_t sm[8], counts[3];
    llm4d_blend_indices((double[]){0.5, 0.5}, 2, 8, ds, sm, counts);
    static const uint16_t want_d[8] = {0, 1, 0, 1, 0, 1, 0, 1};
    static const int64_t want_s[8] = {0, 0, 1, 1, 2, 2, 3, 3};
    check(!memcmp(ds, want_d, sizeof ds) && !memcmp(sm, want_s, sizeof sm) && counts[0] == 4 && counts[1] == 4,
          "blend 0.5/0.5: ties go to the first corpus, alternating 0 1 0 1, samples 0 0 1 1");
    llm4d_blend_indices((double[]){1.0}, 1, 8, ds, sm, counts);
    int ok = counts[0] == 8;
    for (int i = 0; i < 8; i++) ok &= ds[i] == 0 && sm[i] == i;
    check(ok, "blend of one corpus is the identity");
    llm4d_blend_indices((double[]){0.0, 0.25, 0.75}, 3, 8, ds, sm, counts);
    /* i=0 (x=1): errors 0, .25, .75 -> 2; i=1: 0, .25, -.25 -> 1; i=2 (x=2): 0, -.5, .5 -> 2; i=3: 0, -.25, .25
     * -> 2; i=4: 0, 0, 0 -> the weight-0 corpus wins the tie, as in Megatron (llm4d_blend_build leaves it out) */
    static const uint16_t want3[8] = {2, 1, 2, 2, 0, 2, 1, 2};
    check(!memcmp(ds, want3, sizeof ds), "Megatron's loop, 0/0.25/0.75 on hand: 2 1 2 2 0 2 1 2 (got %d %d %d %d %d %d %d %d)",
          ds[0], ds[1], ds[2], ds[3], ds[4], ds[5], ds[6], ds[7]);

    enum { N = 100000 };
    uint16_t *d = malloc(N * sizeof *d);
    int64_t *s = malloc(N * sizeof *s), c[3] = {0, 0, 0}, got[3];
    const double w[3] = {0.2, 0.3, 0.5};
    llm4d_blend_indices(w, 3, N, d, s, got);
    ok = 1;
    for (int64_t i = 0; i < N; i++) {
        ok &= s[i] == c[d[i]];
        c[d[i]]++;
        for (int k = 0; k < 3; k++) ok &= fabs((double)c[k] - w[k] * (double)(i + 1)) <= 1.0 + 1e-9;
    }
    check(ok && got[0] == c[0] && got[1] == c[1] && got[2] == c[2] && c[0] == 20000 && c[1] == 30000,
          "blend 0.2/0.3/0.5 over %d items: each corpus's items numbered 0,1,2,..., draws within 1 of w*i, counts "
          "%lld %lld %lld",
          N, (long long)got[0], (long long)got[1], (long long)got[2]);
    free(d);
    free(s);
}

static int user_error(const char *spec, const char *word) {
    llm4d_corpora cs;
    llm4d_err err = {0};
    llm4d_code rc = llm4d_corpora_open(&cs, spec, &err);
    int ok = rc == LLM4D_EUSER && strstr(err.msg, word) && !strchr(err.msg, '\n');
    check(ok, "input_dir '%.80s' is a user error naming '%s': %s", spec, word, err.msg);
    if (rc == LLM4D_OK) llm4d_corpora_close(&cs);
    return ok;
}

static void check_lists(const char *dir) {
    char a[1024], b[1024], m[1024], spec[4096], sub[1024];
    snprintf(a, sizeof a, "%s/a_ids.npz", dir);
    snprintf(b, sizeof b, "%s/b_ids.npz", dir);
    snprintf(m, sizeof m, "%s/lists/m", dir);
    snprintf(sub, sizeof sub, "%s/lists", dir);
    mkdir(sub, 0777);
    int made = write_npz(a, 1, 40) && write_npz(b, 2, 90) && write_mega(m, 3, 70);
    check(made, "corpora written (a_ids.npz, b_ids.npz, Megatron m.bin/m.idx)");
    if (!made) return;
    const double ta = (double)tokens_of(1, 40), tm = (double)tokens_of(3, 70);
    llm4d_corpora cs;
    llm4d_err err = {0};

    llm4d_code rc = llm4d_corpora_open(&cs, a, &err);
    check(rc == LLM4D_OK && cs.n == 1 && cs.weight[0] == 1.0 && !cs.weighted, "one file: one corpus of weight 1");
    if (rc == LLM4D_OK) llm4d_corpora_close(&cs);

    rc = llm4d_corpora_open(&cs, m, &err);
    check(rc == LLM4D_OK && cs.n == 1 && cs.corpus[0].n_tokens == (int64_t)tm && strstr(cs.corpus[0].path, "m.bin"),
          "a Megatron prefix opens P.bin + P.idx (%s)", rc ? err.msg : cs.corpus[0].path);
    if (rc == LLM4D_OK) llm4d_corpora_close(&cs);

    const char *seps[] = {" ", ",", " , ", "\t"};
    for (int k = 0; k < 4; k++) {
        snprintf(spec, sizeof spec, "%s%s%s.idx", a, seps[k], m);
        rc = llm4d_corpora_open(&cs, spec, &err);
        const double s = ta + tm;
        check(rc == LLM4D_OK && cs.n == 2 && cs.weight[0] == ta / s && cs.weight[1] == tm / s && !cs.weighted,
              "list separated by '%s': 2 corpora weighted by tokens %.0f/%.0f (%s)", seps[k], ta, tm,
              rc ? err.msg : "ok");
        if (rc == LLM4D_OK) llm4d_corpora_close(&cs);
    }

    snprintf(spec, sizeof spec, "0.3 %s 0.7 %s.bin", a, m);
    rc = llm4d_corpora_open(&cs, spec, &err);
    check(rc == LLM4D_OK && cs.n == 2 && cs.weighted && cs.weight[0] == 0.3 / (0.3 + 0.7) &&
              cs.weight[1] == 0.7 / (0.3 + 0.7),
          "weighted list '0.3 a 0.7 m.bin': weights 0.3, 0.7 (%s)", rc ? err.msg : "ok");
    if (rc == LLM4D_OK) llm4d_corpora_close(&cs);

    snprintf(spec, sizeof spec, "2,%s,6,%s", a, b);
    rc = llm4d_corpora_open(&cs, spec, &err);
    check(rc == LLM4D_OK && cs.n == 2 && cs.weight[0] == 0.25 && cs.weight[1] == 0.75,
          "weighted comma list '2,a,6,b': weights normalised to 0.25, 0.75");
    if (rc == LLM4D_OK) llm4d_corpora_close(&cs);

    /* a directory inside a weighted list shares its weight among its corpora by their tokens */
    write_npz(strcat(strcpy(spec, sub), "/c_ids.npz"), 4, 30);
    const double tc = (double)tokens_of(4, 30);
    snprintf(spec, sizeof spec, "1 %s 3 %s", a, sub);
    rc = llm4d_corpora_open(&cs, spec, &err);
    int ok = rc == LLM4D_OK && cs.n == 3 && strstr(cs.corpus[1].path, "c_ids.npz") && strstr(cs.corpus[2].path, "m.bin");
    if (ok) {
        const double raw[3] = {1, 3 * (tc / (tc + tm)), 3 * (tm / (tc + tm))}, sum = raw[0] + raw[1] + raw[2];
        for (int d = 0; d < 3; d++) ok &= cs.weight[d] == raw[d] / sum;
    }
    check(ok, "'1 a 3 DIR': the directory's weight 3 is shared by its c_ids.npz and m.bin by tokens (%s)",
          rc ? err.msg : "ok");
    if (rc == LLM4D_OK) llm4d_corpora_close(&cs);

    user_error("", "names no corpus");
    user_error(" , ", "names no corpus");
    snprintf(spec, sizeof spec, "0.3 %s 0.7", a);
    user_error(spec, "has no path after it");
    snprintf(spec, sizeof spec, "-0.3 %s 1 %s", a, b);
    user_error(spec, "negative");
    snprintf(spec, sizeof spec, "0.3 %s -1 %s", a, b);
    user_error(spec, "negative");
    snprintf(spec, sizeof spec, "%s 0.5 %s", a, b);
    user_error(spec, "looks like a weight");
    snprintf(spec, sizeof spec, "0.5 %s %s 0.5", a, b);
    user_error(spec, "where a weight should be");
    snprintf(spec, sizeof spec, "0.5 0.5 %s %s", a, b);
    user_error(spec, "where a path should be");
    snprintf(spec, sizeof spec, "inf %s", a);
    user_error(spec, "finite");
    snprintf(spec, sizeof spec, "0 %s 0 %s", a, b);
    user_error(spec, "sum to 0");
    snprintf(spec, sizeof spec, "%s %s/missing_ids.npz", a, dir);
    user_error(spec, "missing_ids.npz");
    snprintf(spec, sizeof spec, "%s/empty", dir);
    mkdir(spec, 0777);
    user_error(spec, "no corpus in this directory");
    snprintf(spec, sizeof spec, "%s/empty/notes.txt", dir);
    FILE *f = fopen(spec, "w");
    if (f) fclose(f);
    snprintf(spec, sizeof spec, "%s/empty", dir);
    user_error(spec, "P.bin + P.idx");
    user_error(strcat(spec, "/notes.txt"), "unknown corpus file type");
}

static void check_discovery(const char *dir) {
    char d[1024], p[1200];
    snprintf(d, sizeof d, "%s/disc", dir);
    mkdir(d, 0777);
    /* old Paddle x_ids.npz, Megatron twin x.bin/.idx, Megatron y */
    snprintf(p, sizeof p, "%s/x_ids.npz", d);
    int made = write_npz(p, 5, 20);
    snprintf(p, sizeof p, "%s/x", d);
    made &= write_mega(p, 6, 20);
    snprintf(p, sizeof p, "%s/y", d);
    made &= write_mega(p, 7, 25);
    char **paths = NULL;
    int n = 0;
    llm4d_err err = {0};
    llm4d_code rc = made ? llm4d_corpus_list(d, &paths, &n, &err) : LLM4D_EIO;
    check(rc == LLM4D_OK && n == 2 && strstr(paths[0], "/x_ids.npz") && strstr(paths[1], "/y.idx"),
          "directory: x_ids.npz read, its Megatron twin x.bin/x.idx skipped, Megatron y.idx added (%d found)", n);
    if (rc == LLM4D_OK) llm4d_corpus_list_free(paths, n);
    /* a new-format pair hides the old npz (PaddleNLP's rule) but not the Megatron pair */
    snprintf(p, sizeof p, "%s/w", d);
    made = write_pair(p, 8, 15);
    rc = made ? llm4d_corpus_list(d, &paths, &n, &err) : LLM4D_EIO;
    check(rc == LLM4D_OK && n == 3 && strstr(paths[0], "/w_idx.npz") && strstr(paths[1], "/x.idx") &&
              strstr(paths[2], "/y.idx"),
          "directory with w_idx.npz: the old x_ids.npz is ignored, so Megatron x and y are both read (%d found)", n);
    if (rc == LLM4D_OK) llm4d_corpus_list_free(paths, n);
    llm4d_corpus c;
    rc = llm4d_corpus_open(&c, d, &err);
    check(rc == LLM4D_OK && c.n_found == 3 && strstr(c.path, "w_ids.npy"), "corpus_open(dir) opens the first, n_found 3");
    if (rc == LLM4D_OK) llm4d_corpus_close(&c);
    llm4d_corpora cs;
    rc = llm4d_corpora_open(&cs, d, &err);
    check(rc == LLM4D_OK && cs.n == 3 && cs.corpus[2].n_tokens == tokens_of(7, 25),
          "corpora_open(dir) opens all three (%s)", rc ? err.msg : "ok");
    if (rc == LLM4D_OK) llm4d_corpora_close(&cs);
    /* a lone .idx: its missing .bin is named */
    snprintf(p, sizeof p, "%s/y.bin", d);
    unlink(p);
    rc = llm4d_corpora_open(&cs, d, &err);
    check(rc == LLM4D_EUSER && strstr(err.msg, "y.bin"), "a Megatron .idx without its .bin: %s", err.msg);
    if (rc == LLM4D_OK) llm4d_corpora_close(&cs);
}

static int items_equal(const llm4d_gpt_index *ix, int64_t k, const llm4d_blend *b, int64_t i, int L) {
    int32_t w1[L + 1], w2[L + 1], t[L], l[L];
    float m[L];
    llm4d_gpt_index_get(ix, k, w1);
    llm4d_blend_sample(b, i, 0, t, l, m, w2);
    return !memcmp(w1, w2, sizeof(int32_t) * (size_t)L) && !memcmp(l, w1 + 1, sizeof(int32_t) * (size_t)L);
}

static void check_blend(const char *dir) {
    char spec[4096];
    llm4d_corpora cs;
    llm4d_err err = {0};
    snprintf(spec, sizeof spec, "1 %s/a_ids.npz 2 %s/lists/m", dir, dir);
    if (llm4d_corpora_open(&cs, spec, &err) != LLM4D_OK) {
        check(0, "open the blend's corpora: %s", err.msg);
        return;
    }
    const int L = 16;
    llm4d_gpt_index_opts o = {.split = "90,10,0", .kind = LLM4D_SPLIT_TRAIN, .num_samples = 300, .seq_len = L,
                              .seed = 1234, .write_cache = 1};
    llm4d_blend b;
    llm4d_code rc = llm4d_blend_build(&b, &cs, &o, &err);
    int ok = rc == LLM4D_OK && b.single < 0 && b.size == 300;
    for (int64_t i = 0; ok && i < 2 * b.size; i++) { /* the second pass wraps */
        int d;
        int64_t k;
        llm4d_blend_locate(&b, i, &d, &k);
        ok &= d == b.dataset[i % b.size] && k == b.sample[i % b.size] && items_equal(&b.index[d], k, &b, i, L);
    }
    check(ok, "2-corpus blend (weights 1:2): every item is item sample[i] of corpus dataset[i]'s own GPT index");
    if (rc == LLM4D_OK) {
        const int64_t want0 = (int64_t)ceil(300 * (1.0 / 3.0) * 1.005), want1 = (int64_t)ceil(300 * (2.0 / 3.0) * 1.005);
        check(b.drawn[0] == 100 && b.drawn[1] == 200 && b.index[0].num_samples == want0 &&
                  b.index[1].num_samples == want1,
              "draws 100/200; each corpus's index built for Megatron's ceil(w*N*1.005) = %lld/%lld samples",
              (long long)want0, (long long)want1);
        /* the same index built directly gives the same windows (and the blend reads the same cache) */
        llm4d_gpt_index ix;
        llm4d_gpt_index_opts io = o;
        io.num_samples = b.index[1].num_samples;
        io.write_cache = 0;
        ok = llm4d_gpt_index_build(&ix, &cs.corpus[1], &io, &err) == LLM4D_OK;
        for (int64_t i = 0; ok && i < b.size; i++)
            if (b.dataset[i] == 1) ok &= items_equal(&ix, b.sample[i], &b, i, L);
        check(ok && ix.from_cache, "corpus 1's index built on its own (from the cache) gives the blended items");
        if (ix.corpus) llm4d_gpt_index_free(&ix);
        llm4d_blend_free(&b);
    }

    /* weight 0: never drawn, no index built */
    llm4d_corpora z;
    snprintf(spec, sizeof spec, "0 %s/a_ids.npz 1 %s/lists/m 1 %s/b_ids.npz", dir, dir, dir);
    rc = llm4d_corpora_open(&z, spec, &err);
    if (rc == LLM4D_OK) rc = llm4d_blend_build(&b, &z, &o, &err);
    ok = rc == LLM4D_OK && b.single < 0 && b.drawn[0] == 0 && b.drawn[1] == 150 && b.drawn[2] == 150 &&
         b.index[0].corpus == NULL;
    for (int64_t i = 0; ok && i < b.size; i++) ok &= b.dataset[i] != 0;
    check(ok, "'0 a 1 m 1 b': the weight-0 corpus is never drawn (Megatron's loop would draw it once), 150/150 (%s)",
          rc ? err.msg : "ok");
    if (rc == LLM4D_OK) {
        llm4d_blend_free(&b);
        llm4d_corpora_close(&z);
    }

    /* identity: one corpus, or one corpus left in the split */
    llm4d_corpora one;
    snprintf(spec, sizeof spec, "%s/b_ids.npz", dir);
    rc = llm4d_corpora_open(&one, spec, &err);
    if (rc == LLM4D_OK) rc = llm4d_blend_build(&b, &one, &o, &err);
    if (rc == LLM4D_OK) {
        llm4d_gpt_index ix;
        llm4d_gpt_index_opts io = o;
        io.write_cache = 0;
        ok = b.single == 0 && !b.dataset && llm4d_gpt_index_build(&ix, &one.corpus[0], &io, &err) == LLM4D_OK &&
             ix.n_samples == b.index[0].n_samples && llm4d_blend_pass_len(&b) == ix.n_samples;
        for (int64_t i = 0; ok && i < ix.n_samples + 5; i++) ok &= items_equal(&ix, i, &b, i, L);
        check(ok, "one corpus: the identity blend, item i = the corpus index's item i (%lld windows)",
              (long long)ix.n_samples);
        if (ix.corpus) llm4d_gpt_index_free(&ix);
        llm4d_blend_free(&b);
        llm4d_corpora_close(&one);
    } else
        check(0, "identity blend: %s", err.msg);

    /* a corpus of a single document has no validation documents: left out of the validation blend */
    char p[1100];
    snprintf(p, sizeof p, "%.1000s/single_ids.npz", dir);
    write_npz(p, 9, 1);
    snprintf(spec, sizeof spec, "%s/b_ids.npz %s", dir, p);
    rc = llm4d_corpora_open(&one, spec, &err);
    o.kind = LLM4D_SPLIT_VALID;
    o.num_samples = 20;
    if (rc == LLM4D_OK) rc = llm4d_blend_build(&b, &one, &o, &err);
    check(rc == LLM4D_OK && b.single == 0 && b.weight[1] == 0 && b.weight[0] == 1.0,
          "validation split: a corpus without validation documents is left out, the other blended alone (%s)",
          rc ? err.msg : "ok");
    if (rc == LLM4D_OK) llm4d_blend_free(&b);
    /* with only such corpora the split's error is reported */
    if (rc == LLM4D_OK) llm4d_corpora_close(&one);
    snprintf(spec, sizeof spec, "%s %s", p, p);
    rc = llm4d_corpora_open(&one, spec, &err);
    if (rc == LLM4D_OK) rc = llm4d_blend_build(&b, &one, &o, &err);
    check(rc == LLM4D_EUSER && strstr(err.msg, "no documents"), "no corpus with validation documents: %s", err.msg);
    if (rc == LLM4D_OK) llm4d_blend_free(&b);
    llm4d_corpora_close(&one);
    llm4d_corpora_close(&cs);
}

static long rss_anon_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "RssAnon:", 8)) v = atol(line + 8);
    if (f) fclose(f);
    return v;
}

/* Is p inside a shared mapping of the file whose path ends with name? */
static int mapped_from(const void *p, const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[2048];
    int found = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
        line[strcspn(line, "\n")] = 0;
        size_t n = strlen(line), m = strlen(name);
        if ((uintptr_t)p >= lo && (uintptr_t)p < hi && perms[3] == 's' && n >= m && !strcmp(line + n - m, name))
            found = 1;
    }
    if (f) fclose(f);
    return found;
}

static void check_mmap(const char *dir) {
    char prefix[1024];
    snprintf(prefix, sizeof prefix, "%s/big/huge", dir);
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/big", dir);
    mkdir(sub, 0777);
    /* 16 Mi uint16 ids (32 MiB) in documents of 4096 tokens */
    const int docs = 4096, len = 4096;
    llm4d_megatron_writer w;
    llm4d_err err = {0};
    int ok = llm4d_megatron_writer_open(&w, prefix, LLM4D_DT_U16, &err) == LLM4D_OK;
    int32_t *buf = malloc(len * sizeof *buf);
    for (int d = 0; ok && d < docs; d++) {
        for (int t = 0; t < len; t++) buf[t] = (d * 7 + t * 13) % 50000;
        ok = llm4d_megatron_writer_add(&w, buf, len, &err) == LLM4D_OK;
    }
    free(buf);
    ok = ok && llm4d_megatron_writer_finish(&w, &err) == LLM4D_OK;
    check(ok, "a Megatron corpus of %d x %d uint16 ids (32 MiB) written", docs, len);
    if (!ok) return;
    const long before = rss_anon_kib();
    llm4d_corpora cs;
    char spec[1100];
    snprintf(spec, sizeof spec, "%s.bin", prefix);
    llm4d_code rc = llm4d_corpora_open(&cs, spec, &err);
    if (rc != LLM4D_OK) {
        check(0, "open the large corpus: %s", err.msg);
        return;
    }
    const llm4d_corpus *c = &cs.corpus[0];
    check(c->owned_ids == NULL && c->ids == c->map && mapped_from(c->ids, "/big/huge.bin"),
          "the ids are the shared mapping of huge.bin itself (no copy)");
    const int L = 1024;
    llm4d_gpt_index_opts o = {.split = "100,0,0", .kind = LLM4D_SPLIT_TRAIN, .num_samples = 16000, .seq_len = L,
                              .seed = 1, .cache_prefix = "", .write_cache = 0};
    llm4d_blend b;
    rc = llm4d_blend_build(&b, &cs, &o, &err);
    int64_t sum = 0;
    if (rc == LLM4D_OK) {
        int32_t *win = malloc((L + 1) * sizeof *win), *t = malloc(L * sizeof *t), *l = malloc(L * sizeof *l);
        float *m = malloc(L * sizeof *m);
        for (int64_t i = 0; i < o.num_samples; i++) {
            llm4d_blend_sample(&b, i, 50256, t, l, m, win);
            sum += t[0] + l[L - 1];
        }
        free(win);
        free(t);
        free(l);
        free(m);
    }
    const long after = rss_anon_kib(), file_kib = 32 * 1024;
    check(rc == LLM4D_OK && before > 0 && after - before < file_kib / 4,
          "all %lld samples read (checksum %lld): anonymous memory grew by %ld KiB, under a quarter of the %ld KiB "
          "file", (long long)o.num_samples, (long long)sum, after - before, file_kib);
    if (rc == LLM4D_OK) llm4d_blend_free(&b);
    llm4d_corpora_close(&cs);
}

int main(int argc, char **argv) {
    if (argc > 1) return driver(argc, argv);
    char dir[] = "/tmp/llm4d_blend_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    check_indices();
    check_lists(dir);
    check_discovery(dir);
    check_blend(dir);
    check_mmap(dir);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_summary();
}
